// A kiln wasm function (WASI preview 1, GOOS=wasip1): the event arrives on stdin and the
// response leaves on stdout. The event's "action" picks what the function does, so that one
// module exercises the runtime's contract: echo, environment, package files, the sandbox's
// limits, and each way a function can fail.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

type event struct {
	Action string `json:"action"`
	Path   string `json:"path"`
	MB     int    `json:"mb"`
	Value  any    `json:"value"`
}

func reply(v any) {
	out, _ := json.Marshal(v)
	os.Stdout.Write(out)
}

func fail(errorType, message string) {
	// kiln's error convention: exit code 1, the error object as the last line of stdout.
	out, _ := json.Marshal(map[string]string{"errorType": errorType, "errorMessage": message})
	fmt.Println(string(out))
	os.Exit(1)
}

var sink [][]byte

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("ReadError", err.Error())
	}
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		fail("BadEvent", err.Error())
	}
	fmt.Fprintf(os.Stderr, "wasm-go action=%q bytes=%d\n", ev.Action, len(raw))
	switch ev.Action {
	case "", "echo":
		reply(map[string]any{"echo": ev.Value, "bytes": len(raw)})
	case "env":
		env := map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		reply(env)
	case "read":
		data, err := os.ReadFile(ev.Path)
		if err != nil {
			reply(map[string]any{"error": err.Error()})
			return
		}
		reply(map[string]any{"data": string(data)})
	case "write":
		err := os.WriteFile(ev.Path, []byte("x"), 0o644)
		reply(map[string]any{"error": fmt.Sprint(err)})
	case "list":
		entries, err := os.ReadDir(ev.Path)
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		reply(map[string]any{"names": names, "error": fmt.Sprint(err)})
	case "error":
		fail("OrderError", "order 7 has no items")
	case "panic":
		panic("the function panicked")
	case "exit":
		os.Exit(3)
	case "loop":
		for i := 0; ; i++ {
			if i < 0 {
				break
			}
		}
	case "sleep":
		time.Sleep(time.Duration(ev.MB) * time.Millisecond)
		reply(map[string]any{"slept_ms": ev.MB})
	case "alloc":
		for i := 0; i < ev.MB; i++ {
			block := make([]byte, 1<<20)
			for j := range block {
				block[j] = byte(j)
			}
			sink = append(sink, block)
		}
		reply(map[string]any{"allocated_mb": ev.MB})
	case "big":
		reply(strings.Repeat("x", ev.MB<<20))
	default:
		fail("UnknownAction", ev.Action)
	}
}
