package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// native is the "policyrouter" engine: the server answers policyrouter's
// own GET /idle contract (DESIGN §3, parseIdle). It is the hot path of
// the poller, so it reads into pooled buffers. It reports no models (the
// registration's models, if any, are used) and has no pause or sleep
// state.
//
// Its update has no engine steps: a rolling update sends the trainer's own
// action (POST /updates "action") or waits for the trainer's done, and
// drains the policy first (pause mode "wait" only). It has no lifecycle
// calls either: the fleet's sleep and wake skip it.
type native struct{}

var _ Engine = native{}

// Routes: every proxied route, as the router always forwarded them to a
// native policy.
func (native) Routes() []string { return allRoutes }

func (native) PauseModes() []string                     { return []string{PauseWait} }
func (native) Pause(string) (Call, bool)                { return Call{}, false }
func (native) LoadFromDisk(string, string) (Call, bool) { return Call{}, false }
func (native) SetVersion(string) (Call, bool)           { return Call{}, false }
func (native) Resume() (Call, bool)                     { return Call{}, false }
func (native) Sleep(int) (Call, bool)                   { return Call{}, false }
func (native) Wake([]string) (Call, bool)               { return Call{}, false }
func (native) SleepReported() bool                      { return true }

// MaxIdleBytes is the largest /idle answer accepted; a longer body is a
// failed probe.
const MaxIdleBytes = 4 << 10

func (native) Probe(ctx context.Context, c *Client, s *Server) (Answer, error) {
	resp, err := c.HTTP.Do(s.idleReq.WithContext(ctx))
	if err != nil {
		return Answer{}, err
	}
	defer drain(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Answer{}, &StatusError{Endpoint: "GET " + s.errURL, Status: resp.StatusCode}
	}
	buf := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(buf)
	n, err := readBody(resp.Body, *buf)
	if errors.Is(err, errTooLarge) {
		return Answer{}, &DecodeError{fmt.Errorf("GET %s: read body: %w", s.errURL, err)}
	}
	if err != nil {
		return Answer{}, fmt.Errorf("GET %s: read body: %w", s.errURL, err)
	}
	ans, err := ParseIdle((*buf)[:n])
	if err != nil {
		return Answer{}, &DecodeError{fmt.Errorf("GET %s: %w", s.errURL, err)}
	}
	if ans.HasVersion {
		ans.WeightVersion = strconv.FormatInt(ans.Version, 10)
	}
	return ans, nil
}

// bodyPool holds buffers one byte longer than MaxIdleBytes, to tell a body
// of exactly MaxIdleBytes from a longer one.
var bodyPool = sync.Pool{New: func() any {
	b := make([]byte, MaxIdleBytes+1)
	return &b
}}

var errTooLarge = fmt.Errorf("body exceeds %d bytes", MaxIdleBytes)

// readBody reads r into buf until EOF. It fails when r holds more than
// len(buf)-1 bytes.
func readBody(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	switch {
	case err == nil:
		return n, errTooLarge
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return n, nil
	default:
		return n, err
	}
}

// idleJSON is the object form of an /idle answer. Other fields are allowed.
type idleJSON struct {
	Idle *bool  `json:"idle"`
	Load *int64 `json:"load"`
	// Version is the policy's weight version; weight_version is accepted
	// too, for servers that already report it under that name.
	Version       *int64 `json:"version"`
	WeightVersion *int64 `json:"weight_version"`
}

// ParseIdle reads an /idle answer: a bare true or false, or an object
// with a boolean "idle" and an optional integer "load" (null counts as
// absent). Anything else is an error.
func ParseIdle(body []byte) (Answer, error) {
	b := bytes.TrimSpace(body)
	switch string(b) {
	case "true":
		return Answer{Idle: true}, nil
	case "false":
		return Answer{Idle: false}, nil
	}
	if len(b) == 0 || b[0] != '{' {
		return Answer{}, fmt.Errorf("not an idle answer: %q", truncate(b, 64))
	}
	var v idleJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return Answer{}, fmt.Errorf("decode idle answer: %w", err)
	}
	if v.Idle == nil {
		return Answer{}, errors.New(`idle answer has no boolean "idle"`)
	}
	a := Answer{Idle: *v.Idle}
	if v.Load != nil {
		a.Load, a.HasLoad = *v.Load, true
	}
	if v.Version == nil {
		v.Version = v.WeightVersion
	}
	if v.Version != nil {
		if *v.Version < 0 {
			return Answer{}, fmt.Errorf(`idle answer has a negative "version" %d`, *v.Version)
		}
		a.Version, a.HasVersion = *v.Version, true
	}
	return a, nil
}
