//! The tokens an API server has checked, kept so that a request need not
//! read `job_api_tokens` again: looking the token up was one of the two
//! statements of every `POST /jobs` (docs/benchmarks.md, "API servers keep
//! the tokens they have checked").
//!
//! A kept token is trusted only while the server listens on
//! [`API_TOKEN_CHANNEL`], where every revocation (any change to a token's
//! row) is announced: a token named there is forgotten, and when the LISTEN
//! connection drops every token is forgotten and none is kept again until
//! listening resumes. So a revoked token stops working as soon as the
//! server hears of it, and a server that cannot hear asks the database on
//! every request, as it did before. A kept token is read again after
//! [`MAX_AGE`] whatever was heard, for a listener deaf without knowing it.
//! Only tokens whose secret matched are kept, so made-up tokens cannot fill
//! the cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use jobwire_core::{API_TOKEN_CHANNEL, ApiToken, StoredApiToken};
use jobwire_loop::ListenEvent;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::{CancellationToken, DropGuard};

/// How long a kept token is trusted before the database is asked again,
/// whatever the listener hears: the bound on a revocation's delay should the
/// listener be deaf without knowing it (a half-open connection, a pooler
/// that drops notifications, a schema without the announcing trigger). One
/// lookup per token every ten seconds costs nothing measurable.
const MAX_AGE: Duration = Duration::from_secs(10);

/// How long a token the database last confirmed still opens `/metrics`
/// while the database cannot be asked (see
/// [`TokenCache::authenticate_through_outage`]).
pub(crate) const OUTAGE_GRACE: Duration = Duration::from_secs(300);

/// How long `/metrics` waits for its token check before it takes the token
/// the database last confirmed: within a scrape's timeout (Prometheus's is
/// 10 s by default), where the pool's acquire timeout or a stalled
/// connection would not be.
const OUTAGE_LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// How many removal counters the confirmed tokens are spread over.
const REMOVAL_BUCKETS: usize = 64;

/// Tokens as read from the database, each with when it was read.
type TokensRead = HashMap<String, (Arc<StoredApiToken>, Instant)>;

/// The token read under `token_id` less than `limit` before `now`.
fn read_within(
    tokens: &TokensRead,
    token_id: &str,
    now: Instant,
    limit: Duration,
) -> Option<Arc<StoredApiToken>> {
    let (stored, read_at) = tokens.get(token_id)?;
    (now.saturating_duration_since(*read_at) < limit).then(|| stored.clone())
}

/// Which removal counter `token_id` uses.
fn removal_bucket(token_id: &str) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(token_id) as usize % REMOVAL_BUCKETS
}

/// How long the listener's own connection may take to close at shutdown.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Whether `err` says the database is away for now: unreachable, refusing
/// connections, or ending this one (an administrator's shutdown, a crash,
/// a server that is starting: class 57P01–57P03).
fn database_is_away(err: &sqlx::Error) -> bool {
    super::error::cannot_use_database(err)
        || matches!(err, sqlx::Error::Database(db)
            if matches!(db.code().as_deref(), Some("57P01" | "57P02" | "57P03")))
}

/// Checked tokens by id; cloned into every handler's state.
#[derive(Clone)]
pub(crate) struct TokenCache {
    inner: Arc<Inner>,
}

struct Inner {
    /// Each with when it was read; shared, so that a request takes one
    /// without copying it.
    tokens: Mutex<TokensRead>,
    /// Whether the listener hears changes now: kept tokens are trusted
    /// only then.
    listening: AtomicBool,
    /// Raised by every change heard (and by every drop of the listener), so
    /// that a lookup that started before it does not keep what it read.
    changes: AtomicU64,
    /// Each token whose secret the database last confirmed, with when:
    /// kept through a lost listener (unlike `tokens`), for `/metrics`
    /// during an outage; forgotten on a change heard, or a lookup that no
    /// longer finds it.
    confirmed: Mutex<TokensRead>,
    /// Raised whenever a lookup finds a token gone or a change to a token is
    /// heard, so that a lookup of that token that started before does not
    /// confirm what it read: with the listener down, nothing else orders a
    /// revocation against a slower lookup of the same token. One counter
    /// per bucket of token ids ([`removal_bucket`]), so that lookups of
    /// made-up or revoked tokens do not keep other tokens from being
    /// confirmed.
    removals: [AtomicU64; REMOVAL_BUCKETS],
    /// Stops the listener when the last handler state goes.
    _stop_listening: Option<DropGuard>,
}

impl TokenCache {
    /// A cache over `pool`, listening for changes in the background while
    /// any clone of it lives. Outside a Tokio runtime nothing listens and
    /// every check asks the database.
    pub(crate) fn listening(pool: PgPool) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "no Tokio runtime: API tokens are not cached, every request reads its token"
            );
            return Self::new(None);
        };
        // A connection of its own, outside the pool: held for as long as
        // the server runs, it would otherwise take one of the connections
        // requests are served with.
        let own_connection = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(pool.connect_options().as_ref().clone());
        let stop = CancellationToken::new();
        let cache = Self::new(Some(stop.clone().drop_guard()));
        let weak = Arc::downgrade(&cache.inner);
        runtime.spawn(listen(own_connection, weak, stop));
        cache
    }

    fn new(stop_listening: Option<DropGuard>) -> Self {
        TokenCache {
            inner: Arc::new(Inner {
                tokens: Mutex::new(HashMap::new()),
                listening: AtomicBool::new(false),
                changes: AtomicU64::new(0),
                confirmed: Mutex::new(HashMap::new()),
                removals: std::array::from_fn(|_| AtomicU64::new(0)),
                _stop_listening: stop_listening,
            }),
        }
    }

    /// The live token `presented` is, or `None` (malformed, unknown,
    /// revoked, wrong secret), as [`jobwire_core::authenticate_api_token`]
    /// answers, from the cache when it may be trusted.
    pub(crate) async fn authenticate(
        &self,
        pool: &PgPool,
        presented: &str,
    ) -> jobwire_core::Result<Option<ApiToken>> {
        let Some((token_id, secret)) = jobwire_core::parse_api_token(presented) else {
            return Ok(None);
        };
        if let Some(kept) = self.kept(token_id, Instant::now()) {
            return Ok(kept.admits(secret).then(|| kept.token().clone()));
        }
        let changes_before = self.inner.changes.load(Ordering::SeqCst);
        let removals_before = self.removals_of(token_id).load(Ordering::SeqCst);
        let read_at = Instant::now();
        let Some(stored) = jobwire_core::find_live_api_token(pool, token_id).await? else {
            self.forget_confirmed(token_id);
            return Ok(None);
        };
        if !stored.admits(secret) {
            return Ok(None);
        }
        let token = stored.token().clone();
        // One copy, shared by both maps.
        let stored = Arc::new(stored);
        self.confirm(token_id, &stored, removals_before, read_at);
        self.keep(token_id, stored, changes_before, read_at);
        Ok(Some(token))
    }

    /// As [`TokenCache::authenticate`], for `/metrics`, which must answer
    /// through a database outage: its counters are what explain one (the
    /// relay's broker-down passes, lost lease renewals), and every scrape
    /// failing would show each process as down. The database is asked as
    /// always, for up to [`OUTAGE_LOOKUP_WAIT`]; only when it cannot be
    /// reached (or does not answer in that time: a stalled connection, a
    /// pool waiting for one) is a token it confirmed within
    /// [`OUTAGE_GRACE`] taken instead. A revocation the database answers
    /// with, however late, forgets the token; one the database cannot tell
    /// of (made during the outage, or answered after the wait and unheard)
    /// can be missed for at most the grace. A token never confirmed gets
    /// the outage's error.
    pub(crate) async fn authenticate_through_outage(
        &self,
        pool: &PgPool,
        presented: &str,
    ) -> jobwire_core::Result<Option<ApiToken>> {
        let Some((token_id, secret)) = jobwire_core::parse_api_token(presented) else {
            return Ok(None);
        };
        // A task of its own, so that an answer coming after the wait still
        // forgets a revoked token (or confirms a live one).
        let lookup = tokio::spawn({
            let (cache, pool, presented) = (self.clone(), pool.clone(), presented.to_owned());
            async move { cache.authenticate(&pool, &presented).await }
        });
        let unreachable = match tokio::time::timeout(OUTAGE_LOOKUP_WAIT, lookup).await {
            Ok(Ok(Err(jobwire_core::Error::Database(err)))) if database_is_away(&err) => err,
            Ok(Ok(answered)) => return answered,
            Ok(Err(panicked)) => std::panic::resume_unwind(panicked.into_panic()),
            Err(_) => sqlx::Error::PoolTimedOut,
        };
        match self.confirmed_within_grace(token_id, Instant::now()) {
            Some(stored) if stored.admits(secret) => Ok(Some(stored.token().clone())),
            _ => Err(jobwire_core::Error::Database(unreachable)),
        }
    }

    /// The token the database confirmed under `token_id` less than
    /// [`OUTAGE_GRACE`] before `now`.
    fn confirmed_within_grace(&self, token_id: &str, now: Instant) -> Option<Arc<StoredApiToken>> {
        read_within(&self.confirmed(), token_id, now, OUTAGE_GRACE)
    }

    /// Remember that the database confirmed `stored` at `read_at`, unless a
    /// token was found gone or a change heard since the lookup began
    /// (either may be this token's revocation).
    fn confirm(
        &self,
        token_id: &str,
        stored: &Arc<StoredApiToken>,
        removals_before: u64,
        read_at: Instant,
    ) {
        let mut confirmed = self.confirmed();
        // Overtaken by a removal, the lookup leaves the map as the removal
        // left it.
        if self.removals_of(token_id).load(Ordering::SeqCst) == removals_before {
            confirmed.insert(token_id.to_owned(), (stored.clone(), read_at));
        }
    }

    /// A lookup found `token_id` gone: no earlier lookup may confirm it.
    fn forget_confirmed(&self, token_id: &str) {
        let mut confirmed = self.confirmed();
        self.removals_of(token_id).fetch_add(1, Ordering::SeqCst);
        confirmed.remove(token_id);
    }

    /// The removal counter of `token_id`'s bucket.
    fn removals_of(&self, token_id: &str) -> &AtomicU64 {
        &self.inner.removals[removal_bucket(token_id)]
    }

    /// The token kept under `token_id`, if kept tokens may be trusted and it
    /// was read less than [`MAX_AGE`] before `now` (a parameter, so a test
    /// can ask as if later instead of waiting).
    fn kept(&self, token_id: &str, now: Instant) -> Option<Arc<StoredApiToken>> {
        if !self.inner.listening.load(Ordering::SeqCst) {
            return None;
        }
        read_within(&self.lock(), token_id, now, MAX_AGE)
    }

    /// Keep `stored`, read at `read_at` when the change count was
    /// `changes_before`, unless a change was heard since (it may be this
    /// token's revocation, which the read may not have seen) or nothing is
    /// listening.
    fn keep(
        &self,
        token_id: &str,
        stored: Arc<StoredApiToken>,
        changes_before: u64,
        read_at: Instant,
    ) {
        let mut tokens = self.lock();
        // Checked under the lock that forgetting takes too, so a change
        // heard after this check forgets what is kept here.
        if self.inner.listening.load(Ordering::SeqCst)
            && self.inner.changes.load(Ordering::SeqCst) == changes_before
        {
            tokens.insert(token_id.to_owned(), (stored, read_at));
        }
    }

    /// What the listener heard.
    fn heard(&self, event: ListenEvent<'_>) {
        let mut tokens = self.lock();
        let mut confirmed = self.confirmed();
        self.inner.changes.fetch_add(1, Ordering::SeqCst);
        match event {
            // An empty payload comes from a TRUNCATE: every token went.
            ListenEvent::Notification("") => {
                for removals in &self.inner.removals {
                    removals.fetch_add(1, Ordering::SeqCst);
                }
                tokens.clear();
                confirmed.clear();
            }
            ListenEvent::Notification(token_id) => {
                self.removals_of(token_id).fetch_add(1, Ordering::SeqCst);
                tokens.remove(token_id);
                confirmed.remove(token_id);
            }
            // Listening again: whatever changed meanwhile went unheard, so
            // nothing kept before is trusted.
            ListenEvent::MayHaveMissed => {
                tokens.clear();
                self.inner.listening.store(true, Ordering::SeqCst);
            }
            ListenEvent::Lost => {
                tokens.clear();
                self.inner.listening.store(false, Ordering::SeqCst);
            }
        }
    }

    fn confirmed(&self) -> std::sync::MutexGuard<'_, TokensRead> {
        self.inner
            .confirmed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TokensRead> {
        // A panic while holding the lock leaves a map that is still valid.
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Hear changes to tokens until `stop` (the last clone of the cache went).
async fn listen(own_connection: PgPool, cache: Weak<Inner>, stop: CancellationToken) {
    jobwire_loop::listen(own_connection.clone(), API_TOKEN_CHANNEL, stop, |event| {
        if let Some(inner) = cache.upgrade() {
            TokenCache { inner }.heard(event);
        }
    })
    .await;
    // Closing waits for the connection's UNLISTEN, which a half-open
    // connection never answers.
    if tokio::time::timeout(CLOSE_GRACE, own_connection.close())
        .await
        .is_err()
    {
        tracing::warn!("the API token listener's connection did not close in time; leaving it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(token_id: &str) -> Arc<StoredApiToken> {
        let token = ApiToken {
            token_id: token_id.into(),
            name: format!("token-{token_id}"),
            scope: jobwire_core::Scope::Write,
            tenant: None,
            created_at: chrono::Utc::now(),
            revoked_at: None,
        };
        Arc::new(StoredApiToken::new(token, "secret"))
    }

    #[test]
    fn nothing_is_kept_or_trusted_until_the_listener_listens() {
        let cache = TokenCache::new(None);
        cache.keep("a", stored("a"), 0, Instant::now());
        assert!(cache.kept("a", Instant::now()).is_none());
        cache.heard(ListenEvent::MayHaveMissed);
        let before = cache.inner.changes.load(Ordering::SeqCst);
        cache.keep("a", stored("a"), before, Instant::now());
        assert!(cache.kept("a", Instant::now()).is_some());
        cache.heard(ListenEvent::Lost);
        assert!(cache.kept("a", Instant::now()).is_none());
        cache.heard(ListenEvent::MayHaveMissed);
        assert!(
            cache.kept("a", Instant::now()).is_none(),
            "forgotten when the listener dropped"
        );
    }

    #[test]
    fn a_change_heard_during_a_lookup_keeps_the_lookup_out() {
        let cache = TokenCache::new(None);
        cache.heard(ListenEvent::MayHaveMissed);
        let before = cache.inner.changes.load(Ordering::SeqCst);
        // Another token's change is enough: the lookup may predate this
        // token's revocation as well.
        cache.heard(ListenEvent::Notification("b"));
        cache.keep("a", stored("a"), before, Instant::now());
        assert!(cache.kept("a", Instant::now()).is_none());
    }

    #[test]
    fn a_token_read_too_long_ago_is_read_again() {
        let cache = TokenCache::new(None);
        cache.heard(ListenEvent::MayHaveMissed);
        let changes = cache.inner.changes.load(Ordering::SeqCst);
        let read_at = Instant::now();
        cache.keep("a", stored("a"), changes, read_at);
        let just_in_time = read_at + MAX_AGE - Duration::from_millis(1);
        assert!(cache.kept("a", just_in_time).is_some());
        assert!(cache.kept("a", read_at + MAX_AGE).is_none());
    }

    #[test]
    fn a_confirmed_token_outlasts_a_lost_listener_for_the_grace_but_not_a_change() {
        let cache = TokenCache::new(None);
        cache.heard(ListenEvent::MayHaveMissed);
        let read_at = Instant::now();
        for id in ["a", "b"] {
            let removals = cache.removals_of(id).load(Ordering::SeqCst);
            cache.confirm(id, &stored(id), removals, read_at);
        }
        cache.heard(ListenEvent::Lost);
        assert!(cache.kept("a", read_at).is_none(), "not for other calls");
        assert!(cache.confirmed_within_grace("a", read_at).is_some());
        assert!(
            cache
                .confirmed_within_grace("a", read_at + OUTAGE_GRACE)
                .is_none(),
            "not past the grace"
        );
        cache.heard(ListenEvent::Notification("a"));
        assert!(cache.confirmed_within_grace("a", read_at).is_none());
        assert!(cache.confirmed_within_grace("b", read_at).is_some());
        cache.heard(ListenEvent::Notification(""));
        assert!(cache.confirmed_within_grace("b", read_at).is_none());
        // A lookup overtaken by a change to its token confirms nothing.
        let removals = cache.removals_of("c").load(Ordering::SeqCst);
        cache.heard(ListenEvent::Notification("c"));
        cache.confirm("c", &stored("c"), removals, read_at);
        assert!(cache.confirmed_within_grace("c", read_at).is_none());
    }

    #[test]
    fn a_lookup_that_began_before_a_token_was_found_gone_confirms_nothing() {
        // The listener down: nothing is heard, so only the removal orders
        // a slow lookup (begun before the revocation) against a quick one.
        let cache = TokenCache::new(None);
        let removals = cache.removals_of("a").load(Ordering::SeqCst);
        cache.confirm("a", &stored("a"), removals, Instant::now());
        let slow_lookup_began = cache.removals_of("a").load(Ordering::SeqCst);
        cache.forget_confirmed("a");
        assert!(cache.confirmed_within_grace("a", Instant::now()).is_none());
        cache.confirm("a", &stored("a"), slow_lookup_began, Instant::now());
        assert!(
            cache.confirmed_within_grace("a", Instant::now()).is_none(),
            "the slow lookup put a revoked token back"
        );
        let after = cache.removals_of("a").load(Ordering::SeqCst);
        cache.confirm("a", &stored("a"), after, Instant::now());
        assert!(cache.confirmed_within_grace("a", Instant::now()).is_some());

        // Neither a lost listener nor another token's removal keeps a
        // lookup from confirming its own token (unless they share a bucket).
        let other = (0..)
            .map(|n| format!("x{n}"))
            .find(|id| removal_bucket(id) != removal_bucket("a"))
            .unwrap();
        let began = cache.removals_of("a").load(Ordering::SeqCst);
        cache.heard(ListenEvent::Lost);
        cache.forget_confirmed(&other);
        cache.confirm("a", &stored("a"), began, Instant::now());
        assert!(cache.confirmed_within_grace("a", Instant::now()).is_some());
    }

    #[test]
    fn a_change_forgets_the_token_named_and_a_truncate_every_token() {
        let cache = TokenCache::new(None);
        cache.heard(ListenEvent::MayHaveMissed);
        for id in ["a", "b", "c"] {
            let now = cache.inner.changes.load(Ordering::SeqCst);
            cache.keep(id, stored(id), now, Instant::now());
        }
        cache.heard(ListenEvent::Notification("b"));
        assert!(cache.kept("a", Instant::now()).is_some());
        assert!(cache.kept("b", Instant::now()).is_none());
        cache.heard(ListenEvent::Notification(""));
        assert!(cache.kept("a", Instant::now()).is_none());
        assert!(cache.kept("c", Instant::now()).is_none());
    }
}
