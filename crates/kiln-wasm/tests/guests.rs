//! Real guests compiled from Go (GOOS=wasip1) and C (clang + wasi-libc) by
//! tests/fixtures/build.sh; each test is skipped, with a message, when its toolchain is missing.

mod common;

use common::{compiled_fixture, error_type, invoke, request, shared};

#[test]
fn go_echo_answers_the_event_uppercased_and_reports_its_own_errors() {
    let Some(wasm) = compiled_fixture("go-echo") else {
        return;
    };
    let module = shared().cache.load(&wasm).unwrap();

    let response = invoke(&module, request(br#"{"name": "kiln"}"#));
    assert_eq!(
        response.error,
        None,
        "{}",
        String::from_utf8_lossy(&response.logs)
    );
    assert_eq!(response.body, br#"{"NAME": "KILN"}"#);
    assert!(String::from_utf8_lossy(&response.logs).contains("go echo got 16 bytes"));

    let response = invoke(&module, request(br#"{"fail": true}"#));
    assert_eq!(error_type(&response), "GoError");
    assert_eq!(response.error.unwrap().message, "asked to fail");
}

#[test]
fn c_echo_sees_its_environment_and_reads_its_package_under_var_task() {
    let Some(wasm) = compiled_fixture("c-echo") else {
        return;
    };
    let module = shared().cache.load(&wasm).unwrap();

    let mut req = request(b"from C");
    req.env = vec![("GREETING".into(), "hej".into())];
    let response = invoke(&module, req);
    assert_eq!(response.error, None);
    assert_eq!(response.body, b"from C");
    assert_eq!(
        String::from_utf8_lossy(&response.logs),
        "c echo: 6 bytes, GREETING=hej\n"
    );

    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("README.md"), "# packaged\n").unwrap();
    let mut req = request(b"{}");
    req.env = vec![("READ_FILE".into(), "/var/task/README.md".into())];
    req.code_dir = Some(code.path().to_path_buf());
    let response = invoke(&module, req.clone());
    assert_eq!(
        response.error,
        None,
        "{}",
        String::from_utf8_lossy(&response.logs)
    );
    assert_eq!(response.body, b"# packaged\n");

    // Nothing outside /var/task is reachable.
    req.env = vec![("READ_FILE".into(), "/etc/passwd".into())];
    assert_eq!(error_type(&invoke(&module, req)), "FileNotFound");
}
