// The migrations are embedded by `sqlx::migrate!`; a new file in them must rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
