module kiln.test/wasmfn

go 1.21
