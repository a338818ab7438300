// A kiln wasm function (GOOS=wasip1) that keeps state in its session through kiln's Go SDK
// (runtimes/wasm/go/session). The event's "action" picks the call.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"kiln/session"
)

type event struct {
	Action string `json:"action"`
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Size   int    `json:"size"`
}

func reply(v any) {
	out, _ := json.Marshal(v)
	os.Stdout.Write(out)
}

func fail(errorType string, err error) {
	out, _ := json.Marshal(map[string]string{"errorType": errorType, "errorMessage": err.Error()})
	fmt.Println(string(out))
	os.Exit(1)
}

func errorName(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, session.ErrNoSession):
		return "NoSession"
	case errors.Is(err, session.ErrLimitExceeded):
		return "LimitExceeded"
	case errors.Is(err, session.ErrInvalid):
		return "Invalid"
	case errors.Is(err, session.ErrEnded):
		return "Ended"
	}
	return err.Error()
}

func main() {
	raw, _ := io.ReadAll(os.Stdin)
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		fail("BadEvent", err)
	}
	switch ev.Action {
	case "incr":
		n := 0
		if _, err := session.GetJSON("n", &n); err != nil {
			fail("Session", err)
		}
		if err := session.PutJSON("n", n+1); err != nil {
			fail("Session", err)
		}
		reply(map[string]any{"n": n + 1})
	case "id":
		id, err := session.ID()
		reply(map[string]any{"id": id, "error": errorName(err)})
	case "put":
		reply(map[string]any{"error": errorName(session.PutJSON(ev.Key, ev.Value))})
	case "putbytes":
		reply(map[string]any{"error": errorName(session.Put(ev.Key, []byte(strings.Repeat("b", ev.Size))))})
	case "get":
		value, ok, err := session.Get(ev.Key)
		reply(map[string]any{"value": string(value), "found": ok, "error": errorName(err)})
	case "delete":
		reply(map[string]any{"error": errorName(session.Delete(ev.Key))})
	case "keys":
		keys, err := session.Keys()
		reply(map[string]any{"keys": keys, "error": errorName(err)})
	case "transact":
		// Writes "a" then fails when the value says so: all or nothing.
		err := session.Transact(func() error {
			if err := session.PutJSON("a", ev.Value); err != nil {
				return err
			}
			if ev.Value == "fail" {
				return errors.New("changed my mind")
			}
			return session.PutJSON("b", ev.Value)
		})
		reply(map[string]any{"error": errorName(err)})
	case "put-then-error":
		// The function reports its own error: what it wrote is kept, as when a handler raises.
		session.PutJSON(ev.Key, ev.Value)
		fail("OrderError", errors.New("wrote, then failed"))
	case "put-then-trap":
		// The instance dies: nothing was answered, so nothing it wrote is kept.
		session.PutJSON(ev.Key, ev.Value)
		var table []int
		_ = table[len(ev.Key)+5]
	case "put-then-loop":
		session.PutJSON(ev.Key, ev.Value)
		for i := 0; ; i++ {
			if i < 0 {
				break
			}
		}
	default:
		fail("UnknownAction", errors.New(ev.Action))
	}
}
