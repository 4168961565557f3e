//! `cep run` checks everything a user can get wrong before any process starts: one line,
//! exit status 2, nothing of an earlier run printed; and a run that starts leaves no file of
//! an earlier run beside its own results.

use std::path::Path;
use std::process::{Command, Output};

fn cep_run(out: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cep"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .env("RUST_LOG", "warn")
        .output()
        .expect("cep runs")
}

/// A results folder holding an earlier run's files.
fn earlier_run(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("results");
    std::fs::create_dir_all(&out).unwrap();
    for name in ["report.txt", "summary.json", "input.csv", "outputs.csv", "intervals.csv", "standalone-outputs.csv"] {
        std::fs::write(out.join(name), "EARLIER RUN\n").unwrap();
    }
    std::fs::write(out.join("notes.txt"), "the user's own file\n").unwrap();
    out
}

/// The one line a refused run prints; asserts exit status 2 and that nothing else came out.
fn refused(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stdout.contains("EARLIER RUN") && !stderr.contains("EARLIER RUN"), "{stdout}{stderr}");
    assert!(stdout.trim().is_empty(), "stdout: {stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, got: {stderr}");
    lines[0].to_string()
}

#[test]
fn bad_flags_and_files_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = earlier_run(dir.path());
    let bad_ticks = dir.path().join("ticks.txt");
    std::fs::write(&bad_ticks, "AAA;1.0;5\nAAA;1.0;6\nAAA;-3;7\n").unwrap();
    let bad_rules = dir.path().join("bad.rules");
    std::fs::write(&bad_rules, "@name('x') SELECT symbol, volume AS value FROM StockTick;\n").unwrap();
    let a_file = dir.path().join("a-file");
    std::fs::write(&a_file, "").unwrap();
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec!["--workers".into(), "0".into()], "error: --workers must be at least 1".into()),
        (vec!["--batch".into(), "0".into()], "error: --batch must be at least 1".into()),
        (vec!["--symbols".into(), "0".into()], "error: --symbols must be at least 1".into()),
        (
            vec!["--connections".into(), "0".into()],
            "error: --connections must be between 1 and --symbols (1470)".into(),
        ),
        (vec!["--count".into(), "0".into()], "error: --count must be at least 1".into()),
        (vec!["--rate".into(), "-5".into()], "error: --rate must be a non-negative number, got -5".into()),
        (
            vec!["--rules".into(), "/nope.rules".into()],
            "error: cannot read the rules file /nope.rules: No such file or directory (os error 2)".into(),
        ),
        (
            vec![format!("--rules={}", bad_rules.display())],
            format!(
                "error: {}:1:27: unknown field `volume`: a StockTick has `symbol` and `price`",
                bad_rules.display()
            ),
        ),
        (
            vec![format!("--replay={}", bad_ticks.display())],
            format!("error: --replay {}:3: price -3 must be a positive finite number", bad_ticks.display()),
        ),
        (
            vec!["--replay=/nope.txt".into()],
            "error: --replay /nope.txt: cannot read it: No such file or directory".into(),
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(refused(&cep_run(&out, &args)), expected, "{args:?}");
    }
    // Replaying the recorded input of the results folder this run would empty.
    let recorded = out.join("input.csv");
    let line = refused(&cep_run(&out, &["--replay", recorded.to_str().unwrap()]));
    assert_eq!(
        line,
        format!(
            "error: --replay {}: a run replaces its results folder's input.csv; copy it elsewhere or choose another --out",
            recorded.display()
        )
    );
    // Flags that contradict each other, refused by clap (exit 2 too).
    let good_ticks = dir.path().join("good.txt");
    std::fs::write(&good_ticks, "AAA;1.0;5\n").unwrap();
    let replay = format!("--replay={}", good_ticks.display());
    for args in [vec![replay.as_str(), "--speed", "2", "--rate", "100"], vec![replay.as_str(), "--symbols", "10"]] {
        let output = cep_run(&out, &args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"), "{args:?}");
    }
    // A results folder that is a file.
    let line = refused(&cep_run(&a_file, &["--count", "10"]));
    assert_eq!(line, format!("error: --out {}: not a folder", a_file.display()));
    // A secure run's keys folder that is a file.
    std::fs::write(out.join("keys"), "not keys\n").unwrap();
    let line = refused(&cep_run(&out, &["--secure", "--count", "10"]));
    assert_eq!(
        line,
        format!("error: --out {}: keys is not a folder (--secure writes the run's keys there)", out.display())
    );
    std::fs::remove_file(out.join("keys")).unwrap();
    // Keys of the user's own where a secure run's go: never replaced.
    std::fs::create_dir_all(out.join("keys")).unwrap();
    std::fs::write(out.join("keys").join("mine.key"), "the user's own key\n").unwrap();
    let line = refused(&cep_run(&out, &["--secure", "--count", "10"]));
    assert_eq!(
        line,
        format!(
            "error: --out {}: keys holds files no `cep run --secure` marked as its own (no RUN-KEYS.txt: keys of yours, or of a cep older than the mark); they are not replaced: move them or choose another --out",
            out.display()
        )
    );
    assert_eq!(std::fs::read_to_string(out.join("keys").join("mine.key")).unwrap(), "the user's own key\n");
    std::fs::remove_dir_all(out.join("keys")).unwrap();
    // A checkpoint folder no worker could use (under a file).
    let unusable = a_file.join("checkpoints");
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["run", "--count", "10", "--out"])
        .arg(&out)
        .env("CEP_CHECKPOINT_DIR", &unusable)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(
        refused(&output),
        format!("error: CEP_CHECKPOINT_DIR: cannot use the checkpoint folder {}: Not a directory", unusable.display())
    );
    // Flags that only make sense for a replay, as clap refuses a bad flag (exit 2 too).
    let output = cep_run(&out, &["--speed", "10"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--replay"));
    // Nothing of the earlier run was touched by the refused ones.
    assert_eq!(std::fs::read_to_string(out.join("report.txt")).unwrap(), "EARLIER RUN\n");
}

#[test]
fn a_new_run_leaves_no_file_of_an_earlier_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = earlier_run(dir.path());
    let output = cep_run(&out, &["--count", "2000", "--rate", "0", "--csv", "none", "--quiet", "--workers", "1"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("EARLIER RUN"), "{stdout}");
    // This run wrote its own files; the earlier run's input.csv and standalone outputs are gone.
    for name in ["report.txt", "summary.json", "outputs.csv", "intervals.csv"] {
        assert_ne!(std::fs::read_to_string(out.join(name)).unwrap(), "EARLIER RUN\n", "{name}");
    }
    assert!(!out.join("input.csv").exists());
    assert!(!out.join("standalone-outputs.csv").exists());
    // A file of the user's own stays.
    assert!(out.join("notes.txt").exists());
}

#[test]
fn a_secure_run_says_so_and_the_next_run_removes_its_keys_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = earlier_run(dir.path());
    let small = ["--count", "2000", "--rate", "0", "--csv", "none", "--quiet", "--workers", "1"];
    let summary = |out: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
    };
    let output = cep_run(&out, &[&small[..], &["--secure"]].concat());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let keys = out.join("keys");
    let report = |out: &Path| std::fs::read_to_string(out.join("report.txt")).unwrap();
    // Where the keys are, then the verdict.
    assert!(
        stdout.starts_with(&format!("secure: every socket under CURVE; keys in {}\nOK: 2,000 ticks, ", keys.display())),
        "{stdout}"
    );
    assert!(report(&out).contains("[OVERALL], Secure, true\n"));
    assert_eq!(summary(&out)["secure"], true);
    assert!(keys.join("operator.key").is_file() && keys.join("RUN-KEYS.txt").is_file());
    // A secure run after it replaces its keys with fresh ones.
    let first_operator = std::fs::read_to_string(keys.join("operator.key")).unwrap();
    let output = cep_run(&out, &[&small[..], &["--secure"]].concat());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_ne!(std::fs::read_to_string(keys.join("operator.key")).unwrap(), first_operator);
    // An open run into the same folder leaves no key of the secure one behind, and says it ran open.
    let output = cep_run(&out, &small);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("OK: 2,000 ticks, "));
    assert!(report(&out).contains("[OVERALL], Secure, false\n"));
    assert_eq!(summary(&out)["secure"], false);
    assert!(!keys.exists());
    // A keys folder of the user's own stays where an open run goes.
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("mine.key"), "the user's own key\n").unwrap();
    let output = cep_run(&out, &small);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(keys.join("mine.key").is_file());
    // So does a link to a run's keys folder elsewhere: neither followed nor removed.
    std::fs::remove_dir_all(&keys).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("RUN-KEYS.txt"), "").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &keys).unwrap();
    let output = cep_run(&out, &small);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(keys.symlink_metadata().unwrap().file_type().is_symlink() && elsewhere.join("RUN-KEYS.txt").is_file());
}

#[test]
fn a_bad_replay_line_past_the_lines_checked_before_the_start_stops_the_run_with_its_line() {
    // The first 100,000 ticks are checked before anything starts; the rest while the run
    // starts, its first ticks already sent: a bad line there stops it (exit status 2 too).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.txt");
    let mut text: String = (0..150_000).map(|i| format!("S{};10.5;{}\n", i % 50, 1_000 + i)).collect();
    text.push_str("S1;abc;999999\n");
    std::fs::write(&file, text).unwrap();
    let out = dir.path().join("results");
    let output = cep_run(&out, &["--replay", file.to_str().unwrap(), "--workers", "1"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    // The run had started: its verdict, one line, names the line and where its results are.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let verdict =
        format!("FAILED: --replay {}:150001: price `abc` is not a number; the run was stopped", file.display());
    assert!(stdout.starts_with(&verdict), "{stdout}");
    assert!(stdout.ends_with(&format!("; partial results: {}\n", out.join("report.html").display())), "{stdout}");
    // The summary says so too: an incomplete run's failure is never null.
    let summary: cep_core::results::Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let failure = summary.failure.unwrap_or_default();
    assert!(!summary.complete && failure.contains("price `abc` is not a number"), "{failure}");
    assert!(!summary.running, "a run the launcher stopped is not running");
}

/// A run ends with one line a person reads (the YCSB lines stay in report.txt unless asked
/// for), and writes report.html with every figure it names.
#[test]
fn a_complete_run_ends_with_its_verdict_and_writes_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let output = cep_run(&out, &["--count", "3000", "--rate", "0", "--csv", "none", "--quiet", "--workers", "2"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let page = out.join("report.html");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let verdict = lines[0];
    assert!(verdict.starts_with("OK: 3,000 ticks, 0 lost, complete; p50 "), "{verdict}");
    assert!(verdict.ends_with(&format!("; 2 workers; report: {}", page.display())), "{verdict}");
    let html = std::fs::read_to_string(&page).unwrap();
    for heading in cep::run_report::CHARTS {
        assert!(html.contains(&format!("<h2>{heading}</h2>")), "{heading}");
    }
    assert!(html.contains(verdict.split("; report: ").next().unwrap()), "the page opens with the verdict");
    assert_eq!(html.matches("<svg").count(), cep::run_report::CHARTS.len(), "one chart each");
    rendered_in_chromium(&page);

    // Asked for, the YCSB lines come first, report.txt as it is, then the verdict.
    let output = cep_run(&out, &["--count", "3000", "--rate", "0", "--csv", "none", "--quiet", "--print-report"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(stdout.starts_with(&report) && stdout[report.len()..].starts_with("OK: 3,000 ticks"), "{stdout}");
}

/// Opens the page in headless Chromium (Debian's `chromium`, which .ci/run installs) and
/// checks what it rendered: every chart drawn, and a screenshot of the whole page taken.
fn rendered_in_chromium(page: &Path) {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()))
    else {
        // .ci/run installs it and says the tools are required: there this fails.
        assert!(
            std::env::var_os("CEP_TEST_TOOLS_REQUIRED").is_none(),
            "chromium is not installed (apt-get install chromium)"
        );
        eprintln!("no chromium on the PATH (apt-get install chromium): the page was not rendered");
        return;
    };
    let shot = page.with_file_name("report.png");
    let run = |extra: &[&str]| {
        Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,2600"])
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .env("HOME", page.parent().unwrap())
            .output()
            .expect("chromium runs")
    };
    let dom = run(&["--dump-dom"]);
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    for heading in cep::run_report::CHARTS {
        assert!(dom.contains(&format!("<h2>{heading}</h2>")), "rendered without {heading}");
    }
    assert_eq!(dom.matches("<svg").count(), cep::run_report::CHARTS.len(), "every chart rendered");
    let screenshot = run(&[&format!("--screenshot={}", shot.display())]);
    assert!(screenshot.status.success(), "{}", String::from_utf8_lossy(&screenshot.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a screenshot of {} bytes", png.len());
}

/// outputs.csv stops at its bound; the rows it does not take are counted, and every output
/// is still in the run's figures.
#[test]
fn outputs_csv_stops_at_its_bound_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let args = ["--count", "3000", "--rate", "0", "--csv", "all", "--quiet", "--workers", "1"];
    let output = cep_run(&out, &[&args[..], &["--outputs-max-size", "20000"]].concat());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let summary: cep_core::results::Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let csv = std::fs::read_to_string(out.join("outputs.csv")).unwrap();
    let rows = csv.lines().count() as u64 - 1;
    assert!(csv.len() >= 20_000 && csv.len() < 20_400, "{} bytes", csv.len());
    let total: u64 = summary.outputs.values().sum();
    assert!(summary.outputs_not_written > 0);
    assert_eq!(rows + summary.outputs_not_written, total, "every output written or counted");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let suffix = format!(
        "; outputs.csv full: {} rows not written; report: ",
        cep_core::results::grouped(summary.outputs_not_written)
    );
    assert!(stdout.starts_with("OK: 3,000 ticks") && stdout.contains(&suffix), "{stdout}");
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(report.contains(&format!("[OUTPUTS], NotWrittenToCsv, {}\n", summary.outputs_not_written)), "{report}");
}
