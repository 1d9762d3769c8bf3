//! A real headless Chromium, driven over WebDriver: the system's `chromium`
//! and `chromedriver` (Debian's `chromium` and `chromium-driver`, installed
//! by `scripts/services`), each test with its own chromedriver on a free
//! loopback port. `CHROME_BIN` and `CHROMEDRIVER` point elsewhere.
//!
//! Screenshots go to `$JOBWIRE_SCREENSHOTS` (relative to the workspace
//! root; `docs/ui` refreshes the committed ones) or else to a folder under
//! the target directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use jobwire_test_support::free_port;
use serde_json::json;
use tokio::process::{Child, Command};

/// What the browser pretends to be.
#[derive(Debug, Clone, Copy)]
pub enum Screen {
    /// A laptop: a 1280×800 window.
    Laptop,
    /// A phone: 390×844 CSS pixels, as Chromium's device emulation has it.
    Phone,
}

pub struct Browser {
    pub client: Client,
    screen: Screen,
    driver: DriverGroup,
}

/// chromedriver in a process group of its own, which the Chromium it starts
/// joins: dropping this (a test ending, or panicking halfway) kills them
/// all, so no browser outlives its test.
struct DriverGroup(Child);

impl Drop for DriverGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

fn program(env: &str, name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "no {name} on PATH: run scripts/services chromium (Debian's chromium and \
                 chromium-driver), or set {env}"
            )
        })
}

impl Browser {
    pub async fn start(screen: Screen) -> Browser {
        let chromedriver = program("CHROMEDRIVER", "chromedriver");
        let chromium = program("CHROME_BIN", "chromium");
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", chromedriver.display()));
        let url = format!("http://127.0.0.1:{port}");
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--lang=en-US",
        ];
        let mut options = json!({ "binary": chromium, "args": [] });
        match screen {
            Screen::Laptop => args.push("--window-size=1280,800"),
            Screen::Phone => {
                options["mobileEmulation"] = json!({
                    "deviceMetrics": { "width": 390, "height": 844, "pixelRatio": 1.0, "touch": true }
                });
            }
        }
        options["args"] = json!(args);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), options);
        // chromedriver takes a moment to listen.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let client = loop {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(err) if tokio::time::Instant::now() > deadline => {
                    panic!(
                        "no WebDriver session from {}: {err}",
                        chromedriver.display()
                    )
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        Browser {
            client,
            screen,
            driver: DriverGroup(driver),
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    pub async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_owned()
    }

    pub async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("no {css} on the page: {err}"))
            .text()
            .await
            .unwrap()
    }

    pub async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    /// Click what `css` finds and wait for the page it leads to (every
    /// click in these tests navigates: a link or a form's button).
    pub async fn click(&self, css: &str) {
        self.mark_page().await;
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("no {css} to click: {err}"))
            .click()
            .await
            .unwrap();
        self.wait_for_new_page().await;
    }

    /// Follow the link reading `text`.
    pub async fn click_link(&self, text: &str) {
        self.mark_page().await;
        self.client
            .find(Locator::LinkText(text))
            .await
            .unwrap_or_else(|err| panic!("no link {text:?}: {err}"))
            .click()
            .await
            .unwrap();
        self.wait_for_new_page().await;
    }

    /// Run `script` (which submits a form) and wait for the page it leads to.
    pub async fn submit_by_script(&self, script: &str) {
        self.mark_page().await;
        self.client.execute(script, vec![]).await.unwrap();
        self.wait_for_new_page().await;
    }

    /// Tag the document shown now, so the next one can be told from it
    /// (a form can lead back to the same URL).
    async fn mark_page(&self) {
        self.client
            .execute("window.jobwireOldPage = true;", vec![])
            .await
            .unwrap();
    }

    async fn wait_for_new_page(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let loaded = self
                .client
                .execute(
                    "return !window.jobwireOldPage && document.readyState === 'complete';",
                    vec![],
                )
                .await
                .map(|done| done.as_bool() == Some(true))
                // Mid-navigation the old document may be gone already.
                .unwrap_or(false);
            if loaded {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "no new page loaded");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn fill(&self, css: &str, value: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    /// The page's whole text as a person reads it.
    pub async fn body_text(&self) -> String {
        self.text("body").await
    }

    /// Save what the browser shows as `<name>-laptop.png` or `-phone.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let suffix = match self.screen {
            Screen::Laptop => "laptop",
            Screen::Phone => "phone",
        };
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}-{suffix}.png")), png).unwrap();
    }

    /// Whether the page is wider than the screen (something overflows).
    pub async fn overflows_horizontally(&self) -> bool {
        let wider = self
            .client
            .execute(
                "return document.documentElement.scrollWidth > window.innerWidth + 1;",
                vec![],
            )
            .await
            .unwrap();
        wider.as_bool().unwrap()
    }

    /// End the WebDriver session (Chromium quits), then the driver's group.
    pub async fn close(self) {
        let Browser { client, driver, .. } = self;
        let _ = client.close().await;
        drop(driver);
    }
}

fn screenshot_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match std::env::var_os("JOBWIRE_SCREENSHOTS") {
        Some(dir) => root.join(dir),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots"),
    }
}
