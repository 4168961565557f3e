//! Builds the vendored libzmq (zeromq-src) with CURVE, linked statically against libsodium.
//!
//! The upstream build script passes no libsodium, which leaves CURVE out of libzmq (the
//! alternative, libzmq's bundled tweetnacl, is unaudited and slow). libsodium is found through
//! `SODIUM_LIB_DIR` / `SODIUM_INCLUDE_DIR` when set, else through pkg-config; its static
//! archive (`libsodium.a`) is required so the binaries stay self-contained.
use std::env;
use std::path::PathBuf;

fn sodium_location() -> (PathBuf, PathBuf) {
    println!("cargo:rerun-if-env-changed=SODIUM_LIB_DIR");
    println!("cargo:rerun-if-env-changed=SODIUM_INCLUDE_DIR");
    if let (Some(lib), Some(include)) = (env::var_os("SODIUM_LIB_DIR"), env::var_os("SODIUM_INCLUDE_DIR")) {
        return (PathBuf::from(lib), PathBuf::from(include));
    }
    let found = pkg_config::Config::new()
        .statik(true)
        .cargo_metadata(false)
        .env_metadata(false)
        .probe("libsodium")
        .unwrap_or_else(|error| {
            panic!(
                "libzmq needs libsodium for CURVE and it was not found ({}); install it \
                 (Debian: apt-get install libsodium-dev) or set SODIUM_LIB_DIR and SODIUM_INCLUDE_DIR",
                error
            )
        });
    let lib = found.link_paths.first().cloned().unwrap_or_else(|| PathBuf::from("/usr/lib"));
    let include = found.include_paths.first().cloned().unwrap_or_else(|| PathBuf::from("/usr/include"));
    (lib, include)
}

fn main() {
    println!("cargo:rerun-if-changed=build/main.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let (lib, include) = sodium_location();
    if !lib.join("libsodium.a").is_file() {
        panic!(
            "libsodium's static library is not in {} (Debian: apt-get install libsodium-dev)",
            lib.display()
        );
    }
    // libzmq's own compiler warnings are not ours to act on, and cargo shows every one of a
    // local package's: silence them (the C++ compiler takes CXXFLAGS through the cc crate).
    let flags = env::var("CXXFLAGS").unwrap_or_default();
    env::set_var("CXXFLAGS", format!("{} -w", flags));
    // zeromq-src prints its own search path quoted (Debug), which the linker does not take.
    println!("cargo:rustc-link-search=native={}", lib.display());
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(include, lib)))
        .build();
}
