// Package dashboard serves a live status page for people watching a
// training run: every registered policy as a tile, grouped by node, with
// its state, load, in-flight work against capacity, recent throughput and
// last poll, plus the router's totals; during a rolling update (and for
// the latest one) each policy's phase in it, by wave, with its step, its
// reported and expected version and why it failed.
//
// The page is four static files embedded in the binary (HTML, CSS and
// JavaScript; no CDN, fonts or build step). The script reads GET /stats of
// the same origin once a second and renders it, and GET /updates/{id} of
// the update /stats names while it runs and once when it ends (scope read
// too). When /stats answers 401
// the page asks for a bearer token with scope read and keeps it in the
// browser's sessionStorage; the page itself needs no token, since it holds
// no data.
//
// Every answer carries a strict Content-Security-Policy: scripts, styles
// and fetches from the same origin only, no inline script or style, no
// framing.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

//go:embed index.html dashboard.css dashboard.js charts.js
var files embed.FS

// Paths of the files the handler serves. Route all of them (Paths) to
// Handler.
const (
	PagePath   = "/"
	ScriptPath = "/dashboard.js"
	ChartsPath = "/charts.js"
	StylePath  = "/dashboard.css"
)

// Paths lists every path the handler serves.
var Paths = []string{PagePath, ScriptPath, ChartsPath, StylePath}

// ContentSecurityPolicy is sent with every answer of the handler.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	name        string
	contentType string
	body        []byte
	etag        string
}

// handler serves the embedded assets by path.
type handler struct {
	byPath map[string]asset
}

// Handler returns the dashboard: the page at PagePath (and at any path
// ending in "/", so that it can also be mounted under a prefix), its
// script at ScriptPath and its stylesheet at StylePath. It answers GET and
// HEAD, with an ETag so that reloads revalidate cheaply, and 404 or 405
// for anything else. It is safe for concurrent use.
func Handler() http.Handler {
	h := &handler{byPath: map[string]asset{}}
	for _, a := range []struct{ path, name, contentType string }{
		{PagePath, "index.html", "text/html; charset=utf-8"},
		{ScriptPath, "dashboard.js", "text/javascript; charset=utf-8"},
		{ChartsPath, "charts.js", "text/javascript; charset=utf-8"},
		{StylePath, "dashboard.css", "text/css; charset=utf-8"},
	} {
		body, err := files.ReadFile(a.name)
		if err != nil {
			panic("dashboard: embedded file missing: " + a.name) // a build mistake
		}
		sum := sha256.Sum256(body)
		h.byPath[a.path] = asset{
			name:        a.name,
			contentType: a.contentType,
			body:        body,
			etag:        `"` + hex.EncodeToString(sum[:12]) + `"`,
		}
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")

	a, ok := h.lookup(r.URL.Path)
	if !ok {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("ETag", a.etag)
	hdr.Set("Cache-Control", "no-cache") // revalidate: the binary may have changed
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}

// lookup finds the asset for a request path: the script and the
// stylesheet by their names, the page for any directory path.
func (h *handler) lookup(path string) (asset, bool) {
	switch {
	case strings.HasSuffix(path, ScriptPath):
		return h.byPath[ScriptPath], true
	case strings.HasSuffix(path, ChartsPath):
		return h.byPath[ChartsPath], true
	case strings.HasSuffix(path, StylePath):
		return h.byPath[StylePath], true
	case path == "" || strings.HasSuffix(path, "/"):
		return h.byPath[PagePath], true
	}
	return asset{}, false
}
