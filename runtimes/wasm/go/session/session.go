//go:build wasip1

// Package session is kiln's session state for Go functions built with GOOS=wasip1: the state of
// the request's session, read and written through kiln's host calls (the `kiln` import module,
// docs/sessions.md, "wasm").
//
// Reads see the request's own writes. The writes reach the session's log when the function
// exits (returns from main, or exits with the error convention of kiln's wasm ABI); a function
// that traps or times out loses them, as it answered nothing. Requests of one session run one
// at a time, so a read-modify-write is linearizable; Transact adds all-or-nothing.
//
//	n := 0
//	session.GetJSON("n", &n)
//	session.PutJSON("n", n+1)
package session

import (
	"encoding/json"
	"errors"
	"strings"
	"unsafe"
)

//go:wasmimport kiln session_id
func sessionID(buf unsafe.Pointer, capacity uint32) int64

//go:wasmimport kiln session_get
func sessionGet(key unsafe.Pointer, keyLen uint32, buf unsafe.Pointer, capacity uint32) int64

//go:wasmimport kiln session_put
func sessionPut(key unsafe.Pointer, keyLen uint32, value unsafe.Pointer, valueLen uint32, kind uint32) int32

//go:wasmimport kiln session_delete
func sessionDelete(key unsafe.Pointer, keyLen uint32) int32

//go:wasmimport kiln session_keys
func sessionKeys(buf unsafe.Pointer, capacity uint32) int64

//go:wasmimport kiln session_begin
func sessionBegin() int32

//go:wasmimport kiln session_end
func sessionEnd(commit uint32) int32

var (
	// ErrNoSession: the function has sessions off, or the request carried no session id.
	ErrNoSession = errors.New("kiln session: the request has no session")
	// ErrInvalid: an empty or too long key, a JSON value that is not JSON, or a misused
	// transaction.
	ErrInvalid = errors.New("kiln session: invalid key, value or transaction")
	// ErrLimitExceeded: the write would pass MaxValueBytes or MaxSessionBytes; nothing changed.
	ErrLimitExceeded = errors.New("kiln session: limit exceeded")
	// ErrEnded: the session ended while the request ran.
	ErrEnded = errors.New("kiln session: the session has ended")
)

func check(code int64) error {
	switch code {
	case -2:
		return ErrNoSession
	case -3:
		return ErrInvalid
	case -4:
		return ErrLimitExceeded
	case -5:
		return ErrEnded
	}
	if code < 0 {
		return errors.New("kiln session: unknown error")
	}
	return nil
}

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func str(s string) (unsafe.Pointer, uint32) {
	return unsafe.Pointer(unsafe.StringData(s)), uint32(len(s))
}

// scratch serves small reads without an allocation; values larger than it take two calls.
var scratch = make([]byte, 4096)

// fetch runs a call that copies its result into a buffer when it fits and returns its length.
func fetch(call func(buf unsafe.Pointer, capacity uint32) int64) ([]byte, int64) {
	n := call(ptr(scratch), uint32(len(scratch)))
	if n < 0 {
		return nil, n
	}
	if int(n) <= len(scratch) {
		out := make([]byte, n)
		copy(out, scratch[:n])
		return out, n
	}
	out := make([]byte, n)
	return out, call(ptr(out), uint32(len(out)))
}

// ID is the request's session id.
func ID() (string, error) {
	id, code := fetch(sessionID)
	return string(id), check(code)
}

// Get reads key: its value, and whether it was there.
func Get(key string) ([]byte, bool, error) {
	k, kl := str(key)
	value, code := fetch(func(buf unsafe.Pointer, capacity uint32) int64 {
		return sessionGet(k, kl, buf, capacity)
	})
	if code == -1 {
		return nil, false, nil
	}
	if err := check(code); err != nil {
		return nil, false, err
	}
	return value, true, nil
}

// GetJSON decodes key's value into v; false if the key has no value.
func GetJSON(key string, v any) (bool, error) {
	value, ok, err := Get(key)
	if !ok || err != nil {
		return false, err
	}
	return true, json.Unmarshal(value, v)
}

// Put stores value under key, as bytes.
func Put(key string, value []byte) error {
	k, kl := str(key)
	return check(int64(sessionPut(k, kl, ptr(value), uint32(len(value)), 0)))
}

// PutJSON stores the JSON encoding of v under key, as a JSON value.
func PutJSON(key string, v any) error {
	value, err := json.Marshal(v)
	if err != nil {
		return err
	}
	k, kl := str(key)
	return check(int64(sessionPut(k, kl, ptr(value), uint32(len(value)), 1)))
}

// Delete removes key.
func Delete(key string) error {
	k, kl := str(key)
	return check(int64(sessionDelete(k, kl)))
}

// Keys lists the session's keys, sorted.
func Keys() ([]string, error) {
	raw, code := fetch(sessionKeys)
	if err := check(code); err != nil {
		return nil, err
	}
	keys := strings.Split(string(raw), "\x00")
	return keys[:len(keys)-1], nil
}

// Transact runs fn; its writes stand if it returns nil and are undone if it returns an error
// or panics. It returns fn's error.
func Transact(fn func() error) (err error) {
	if err := check(int64(sessionBegin())); err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			sessionEnd(0)
		}
	}()
	if err = fn(); err != nil {
		return err
	}
	committed = true
	return check(int64(sessionEnd(1)))
}
