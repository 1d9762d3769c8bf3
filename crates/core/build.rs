// `sqlx::migrate!` embeds the migrations directory at compile time, and
// cargo does not watch that directory by itself: without this, adding a
// migration left an already-built binary applying the old set.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
