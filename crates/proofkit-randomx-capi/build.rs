//! Gives the cdylib the soname of the reference library, so that programs linked against
//! Debian's `librandomx.so.0` load ours through `LD_LIBRARY_PATH`.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librandomx.so.0");
    }
}
