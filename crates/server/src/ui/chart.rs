//! Jobs finished per minute as bar charts drawn on the server in SVG: no
//! script, no chart library, readable with JavaScript off.

use maud::{Markup, html};

use super::format::count;

/// Minutes a chart covers.
pub(crate) const MINUTES: usize = 60;

/// Per-minute counts, oldest first: `bars[MINUTES - 1]` is the minute
/// under way.
pub(crate) type Minutes = [i64; MINUTES];

/// Put a count `minutes_ago` back into its slot (ignoring any outside the
/// window).
pub(crate) fn add(bars: &mut Minutes, minutes_ago: i32, finished: i64) {
    if let Ok(back) = usize::try_from(minutes_ago)
        && back < MINUTES
    {
        bars[MINUTES - 1 - back] += finished;
    }
}

fn bar_path(bars: &Minutes, width: f64, height: f64) -> String {
    let peak = bars.iter().copied().max().unwrap_or(0).max(1) as f64;
    let step = width / MINUTES as f64;
    let mut path = String::new();
    for (i, &n) in bars.iter().enumerate() {
        if n == 0 {
            continue;
        }
        // At least a pixel, so a minute with one job still shows.
        let h = (n as f64 / peak * height).max(1.0);
        let x = i as f64 * step;
        path.push_str(&format!(
            "M{x:.2} {height:.2}h{w:.2}v-{h:.2}h-{w:.2}z",
            w = step * 0.8
        ));
    }
    path
}

/// A small chart for a table cell, with the hour's total as its title.
pub(crate) fn sparkline(bars: &Minutes) -> Markup {
    let total: i64 = bars.iter().sum();
    let label = format!("{} finished in the last hour", count(total));
    html! {
        svg.spark viewBox="0 0 120 24" width="120" height="24" role="img" aria-label=(label) {
            title { (label) }
            line x1="0" y1="23.5" x2="120" y2="23.5" class="axis" {}
            path d=(bar_path(bars, 120.0, 23.0)) class="bars" {}
        }
    }
}

/// The overview's chart of every queue together, with its scale.
pub(crate) fn chart(bars: &Minutes) -> Markup {
    let total: i64 = bars.iter().sum();
    let peak = bars.iter().copied().max().unwrap_or(0);
    let label = format!(
        "Jobs finished per minute over the last hour: {} in all, at most {} in a minute",
        count(total),
        count(peak)
    );
    html! {
        figure.chart {
            svg viewBox="0 0 600 140" role="img" aria-label=(label) preserveAspectRatio="none" {
                title { (label) }
                line x1="0" y1="120.5" x2="600" y2="120.5" class="axis" {}
                line x1="0" y1="0.5" x2="600" y2="0.5" class="grid" {}
                path d=(bar_path(bars, 600.0, 120.0)) class="bars" {}
            }
            figcaption {
                span { "60 min ago" }
                span { "peak " (count(peak)) "/min · " (count(total)) " in the hour" }
                span { "now" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_minute_and_bars_scale_to_the_peak() {
        let mut bars = [0; MINUTES];
        add(&mut bars, 0, 4);
        add(&mut bars, 59, 2);
        add(&mut bars, 60, 100); // outside the hour
        add(&mut bars, -1, 100); // a clock step: ignored, never a panic
        assert_eq!(bars[MINUTES - 1], 4);
        assert_eq!(bars[0], 2);
        assert_eq!(bars.iter().sum::<i64>(), 6);
        let path = bar_path(&bars, 600.0, 120.0);
        // Two bars: the peak full height, the other half of it.
        assert_eq!(path.matches('M').count(), 2);
        assert!(path.contains("v-120.00"), "{path}");
        assert!(path.contains("v-60.00"), "{path}");
        assert_eq!(bar_path(&[0; MINUTES], 600.0, 120.0), "");
    }
}
