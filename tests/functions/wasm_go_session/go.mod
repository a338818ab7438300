module kiln-test/wasm-go-session

go 1.21

require kiln/session v0.0.0

replace kiln/session => ../../../runtimes/wasm/go/session
