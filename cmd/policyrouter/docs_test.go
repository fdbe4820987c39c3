package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/internal/prereq"
)

// docExample is one curl example of README.md or docs/*.md (a ```sh block
// that calls curl): the file it is in, a string found in that block alone,
// and the test that runs it, or why no test does.
type docExample struct {
	file, marker string
	runBy        string
	notRun       string
}

// docExamples lists every curl example of the documentation.
// TestDocsCurlExamplesAccountedFor holds the list and the files to each
// other: a new example needs a row here, and a test to run it or a reason.
var docExamples = []docExample{
	{file: "README.md", marker: "/v1/chat/completions", runBy: "TestDocsExamplesOnDemo"},
	{file: "README.md", marker: "/select", runBy: "TestDocsExamplesOnDemo"},
	{file: "docs/walkthrough.md", marker: "fake-policy --addr 127.0.0.1:9100", runBy: "TestREADMEWalkthrough"},
	{file: "docs/walkthrough.md", marker: "$R/registration", runBy: "TestREADMEWalkthrough"},
	{file: "docs/walkthrough.md", marker: "current_loads", runBy: "TestREADMEWalkthrough"},
	{file: "docs/walkthrough.md", marker: "$R/release", runBy: "TestREADMEWalkthrough"},
	{file: "docs/walkthrough.md", marker: "status --url $R", runBy: "TestREADMEWalkthrough"},
	{file: "docs/proxy.md", marker: "X-Session-ID: episode-7", runBy: "TestDocsExamplesOnDemo"},
	{file: "docs/engines.md", marker: "--api-key sk-test", runBy: "TestDocsExamplesOnDemo"},
	{file: "docs/updates.md", marker: "min_available_per_node", runBy: "TestDocsExamplesOnDemo"},
	{file: "docs/updates.md", marker: "finish_weight_update", runBy: "TestDocsExamplesOnDemo"},
	{file: "docs/updates.md", marker: "/fleet/sleep", runBy: "TestDocsExamplesOnDemo"},
	{file: "docs/updates.md", marker: "# 1. The trainer wrote /ckpt/step-43",
		notRun: "a trainer's steps, not a script: it names policies as <id> placeholders, needs jq, and step 3 is the external mode instead of step 1's"},
	{file: "docs/security.md", marker: "openssl req", runBy: "TestREADMETLSStartup"},
}

var shBlock = regexp.MustCompile("(?ms)^```sh\n(.*?)^```")

// docFiles returns README.md and docs/*.md, relative to the repository root.
func docFiles(tb testing.TB) []string {
	tb.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		tb.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	return files
}

// curlBlocks returns the ```sh blocks of a documentation file that call curl.
func curlBlocks(tb testing.TB, file string) []string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("../..", file))
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, m := range shBlock.FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], "curl") {
			out = append(out, m[1])
		}
	}
	return out
}

// docBlock returns the example of docExamples found by file and marker,
// which must name the calling test as the one that runs it.
func docBlock(tb testing.TB, file, marker string) string {
	tb.Helper()
	name, _, _ := strings.Cut(tb.Name(), "/")
	found := false
	for _, e := range docExamples {
		if e.file == file && e.marker == marker {
			found = true
			if e.runBy != name {
				tb.Fatalf("docExamples says %s runs the example of %s marked %q, not %s", e.runBy, file, marker, name)
			}
		}
	}
	if !found {
		tb.Fatalf("no row of docExamples for the example of %s marked %q", file, marker)
	}
	var hits []string
	for _, b := range curlBlocks(tb, file) {
		if strings.Contains(b, marker) {
			hits = append(hits, b)
		}
	}
	if len(hits) != 1 {
		tb.Fatalf("%s has %d curl examples containing %q; want 1", file, len(hits), marker)
	}
	return hits[0]
}

// TestDocsCurlExamplesAccountedFor checks that every curl example of the
// README and docs/ is run by a test or listed with the reason it is not.
func TestDocsCurlExamplesAccountedFor(t *testing.T) {
	rows := make([]int, len(docExamples))
	for _, file := range docFiles(t) {
		for _, b := range curlBlocks(t, file) {
			first, _, _ := strings.Cut(b, "\n")
			var match []int
			for i, e := range docExamples {
				if e.file == file && strings.Contains(b, e.marker) {
					match = append(match, i)
					rows[i]++
				}
			}
			if len(match) != 1 {
				t.Errorf("%s: the curl example beginning %q matches %d rows of docExamples; want 1 (add a row: the test that runs it, or why none does)", file, first, len(match))
			}
		}
	}
	for i, e := range docExamples {
		if rows[i] != 1 {
			t.Errorf("docExamples row %s %q matches %d curl examples; want 1", e.file, e.marker, rows[i])
		}
		if (e.runBy == "") == (e.notRun == "") {
			t.Errorf("docExamples row %s %q: name the test that runs it, or say why none does (one of the two)", e.file, e.marker)
		}
	}
}

// demoScript runs a documentation example as written against the router
// at addr: $R and $J as the docs define them, and the docs' default
// address replaced by addr.
func demoScript(tb testing.TB, what, addr, block string, env ...string) string {
	tb.Helper()
	s := "set -euo pipefail\nR=http://" + addr + "\nJ='Content-Type: application/json'\n" +
		strings.ReplaceAll(block, "127.0.0.1:8080", addr)
	return runScript(tb, what, s, env...)
}

// TestDocsExamplesOnDemo runs the README's two examples and the docs'
// curl examples that need no more than a simulated fleet, each against
// the demo of the engine it is written for, and checks what they print.
func TestDocsExamplesOnDemo(t *testing.T) {
	prereq.LookPath(t, "curl", "apt-get install curl; .ci/run installs it")
	t.Run("policyrouter", func(t *testing.T) {
		p := start(t, nil, "demo", "--addr", "127.0.0.1:0", "--workers", "0")
		for _, tt := range []struct {
			file, marker string
			want         []string
		}{
			{"README.md", "/v1/chat/completions", []string{`"model":"fake-policy"`, `"finish_reason":"length"`}},
			{"README.md", "/select", []string{`"lease_id":`, `{"released":true`}},
			{"docs/proxy.md", "X-Session-ID: episode-7", []string{`"object":"chat.completion.chunk"`}},
			{"docs/updates.md", "min_available_per_node", []string{`"version":8`, `"state":`}},
		} {
			out := demoScript(t, tt.file+" "+tt.marker, p.addr, docBlock(t, tt.file, tt.marker))
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("%s, the example with %q: output lacks %s:\n%s", tt.file, tt.marker, want, out)
				}
			}
		}
	})
	t.Run("sglang", func(t *testing.T) {
		p := start(t, nil, "demo", "--engine", "sglang", "--addr", "127.0.0.1:0", "--workers", "0")
		out := demoScript(t, "sleep and wake", p.addr, docBlock(t, "docs/updates.md", "/fleet/sleep"))
		for _, want := range []string{
			`"call":"POST /release_memory_occupation","status":200`,
			`[(0, 'asleep'), (1, 'asleep')]`,
			`"call":"POST /resume_memory_occupation","status":200`,
			`"failed":[]`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("sleep and wake: output lacks %s:\n%s", want, out)
			}
		}
	})
	t.Run("vllm", func(t *testing.T) {
		p := start(t, nil, "demo", "--engine", "vllm", "--addr", "127.0.0.1:0", "--workers", "0")
		out := demoScript(t, "weight transfer", p.addr, docBlock(t, "docs/updates.md", "finish_weight_update"))
		if n := strings.Count(out, `"failed":[]`); n != 4 {
			t.Errorf("weight transfer: %d of 4 fan-outs without failures:\n%s", n, out)
		}
	})
	t.Run("api key", func(t *testing.T) {
		p := start(t, nil, "serve", "--addr", "127.0.0.1:0")
		fleet := freeAddrs(t, 1)[0]
		block := docBlock(t, "docs/engines.md", "--api-key sk-test")
		if !strings.Contains(block, "127.0.0.1:9200") {
			t.Fatal("the api-key example no longer uses 127.0.0.1:9200; update this test with it")
		}
		// The fake engines start in the background: wait for them as the
		// walk-through waits for the router, then read the state back.
		block = strings.Replace(block, "&\n", "&\nuntil curl -s -o /dev/null http://127.0.0.1:9200/p/1/health; do sleep 0.1; done\n", 1)
		block += "until curl -sf $R/stats | grep -q '\"state\":\"idle\".*\"state\":\"idle\"'; do sleep 0.1; done\ncurl -sS $R/stats\nkill %1\nwait\n"
		out := demoScript(t, "api key", p.addr, strings.ReplaceAll(block, "127.0.0.1:9200", fleet))
		if strings.Contains(out, "sk-test") {
			t.Errorf("the api key is shown:\n%s", out)
		}
		if !strings.Contains(out, `"engine":"sglang"`) {
			t.Errorf("no sglang policy in /stats:\n%s", out)
		}
	})
}
