//! Builds the vendored libzmq (zeromq-src) with CURVE, linked statically against libsodium.
//!
//! The upstream build script passes no libsodium, which leaves CURVE out of libzmq (the
//! alternative, libzmq's bundled tweetnacl, is unaudited and slow). libsodium comes from the
//! `libsodium-sys-stable` dependency, which compiles the source tarball it carries and tells
//! this script where through its `links = "sodium"` metadata (`DEP_SODIUM_LIB`,
//! `DEP_SODIUM_INCLUDE`). `SODIUM_LIB_DIR` with `SODIUM_INCLUDE_DIR` picks a libsodium already
//! built instead. Its static archive (`libsodium.a`) is required so the binaries stay
//! self-contained.
use std::env;
use std::path::PathBuf;

/// Features libzmq's own CMake build finds on every Linux and zeromq-src does not define (the
/// ones that change behaviour here). Without them a socket's wake-ups go through a Unix socket
/// pair rather than an eventfd (a socket buffer allocated and freed per wake-up: the router
/// spent a third more CPU at 200k ticks/s, one tick per message), the TCP keepalive options
/// the transport sets were silently ignored (a host that vanishes without closing its
/// connections went unnoticed), libzmq's timers ran on the wall clock (gettimeofday) rather
/// than CLOCK_MONOTONIC, and descriptors were made close-on-exec by a second call rather
/// than when created.
const LINUX_FEATURES: &str = " -DZMQ_HAVE_EVENTFD -DZMQ_HAVE_EVENTFD_CLOEXEC -DZMQ_HAVE_SOCK_CLOEXEC \
    -DHAVE_ACCEPT4 -DZMQ_HAVE_SO_KEEPALIVE -DZMQ_HAVE_TCP_KEEPCNT \
    -DZMQ_HAVE_TCP_KEEPIDLE -DZMQ_HAVE_TCP_KEEPINTVL -DHAVE_CLOCK_GETTIME";

fn sodium_location() -> (PathBuf, PathBuf) {
    println!("cargo:rerun-if-env-changed=SODIUM_LIB_DIR");
    println!("cargo:rerun-if-env-changed=SODIUM_INCLUDE_DIR");
    if let (Some(lib), Some(include)) = (env::var_os("SODIUM_LIB_DIR"), env::var_os("SODIUM_INCLUDE_DIR")) {
        return (PathBuf::from(lib), PathBuf::from(include));
    }
    match (env::var_os("DEP_SODIUM_LIB"), env::var_os("DEP_SODIUM_INCLUDE")) {
        (Some(lib), Some(include)) => (PathBuf::from(lib), PathBuf::from(include)),
        _ => panic!(
            "libzmq needs libsodium for CURVE and libsodium-sys-stable did not say where it built it; \
             set SODIUM_LIB_DIR and SODIUM_INCLUDE_DIR to a libsodium with its static library"
        ),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build/main.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    let (lib, include) = sodium_location();
    if !lib.join("libsodium.a").is_file() {
        panic!("libsodium's static library is not in {}", lib.display());
    }
    // Checked here, not left to the compiler's search path: a system's own sodium.h there
    // would hide a wrong folder (and mismatch the library linked).
    if !include.join("sodium.h").is_file() {
        panic!("libsodium's header sodium.h is not in {}", include.display());
    }
    // libzmq's own compiler warnings are not ours to act on, and cargo shows every one of a
    // local package's: silence them (the C++ compiler takes CXXFLAGS through the cc crate).
    let mut flags = env::var("CXXFLAGS").unwrap_or_default();
    flags.push_str(" -w");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        flags.push_str(LINUX_FEATURES);
    }
    env::set_var("CXXFLAGS", flags);
    // zeromq-src prints its own search path quoted (Debug), which the linker does not take.
    println!("cargo:rustc-link-search=native={}", lib.display());
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        .build();
}
