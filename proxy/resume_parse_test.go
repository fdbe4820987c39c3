package proxy

import (
	"reflect"
	"strings"
	"testing"
)

// parseCases hold /generate bodies parseResumable must read as
// parseResumableJSON does.
var parseCases = []string{
	`{"input_ids":[1,2],"stream":true,"sampling_params":{"max_new_tokens":5,"min_new_tokens":2}}`,
	`{"input_ids":[1,2],"stream":false}`,
	`{"input_ids":[1,2],"stream":null}`,
	`{"input_ids":[1,2],"stream":"true"}`,
	`{"input_ids":[1,2],"Stream":true}`,
	`{"input_ids":[1,2],"stream":true,"stream":false}`,
	`{"input_ids":[ 1 , -2 ,0 ],"sampling_params":null}`,
	`{"input_ids":[],"sampling_params":{"max_new_tokens":null}}`,
	`{"input_ids":[1,null,3]}`,
	`{"input_ids":[1.5]}`,
	`{"input_ids":[1e3]}`,
	`{"input_ids":[1.0]}`,
	`{"input_ids":[9223372036854775807]}`,
	`{"input_ids":[9223372036854775808]}`,
	`{"input_ids":[123456789012345678,-123456789012345678]}`,
	`{"input_ids":["1"]}`,
	`{"input_ids":[[1],[2]]}`,
	`{"input_ids":{"a":1}}`,
	`{"input_ids":7}`,
	`{"input_ids":null,"text":"hi"}`,
	`{"text":"hi"}`,
	`{"text":null}`,
	`{}`,
	`{"Input_IDs":[1]}`,
	`{"input_ids":[1],"input_ids":"x"}`,
	`{"input_ids":"x","input_ids":[1]}`,
	`{"input\u005fids":[1]}`,
	"{\"inp\xc3\xbct_ids\":[1],\"input_ids\":[2]}",
	`{"input_ids":[1],"sampling_params":[]}`,
	`{"input_ids":[1],"sampling_params":{"n":2}}`,
	`{"input_ids":[1],"sampling_params":{"regex":"a+"}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":"x"}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":5},"sampling_params":{"max_new_tokens":9}}`,
	`{"input_ids":[1],"sampling_params":{"MAX_NEW_TOKENS":5}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":5,"Max_New_Tokens":7}}`,
	`{"input_ids":[1],"sampling_params":{"Max_New_Tokens":7,"max_new_tokens":5}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":5,"max_new_tokens":null}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":1.0}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":-3,"min_new_tokens":-1}}`,
	`{"input_ids":[1],"sampling_params":{"max_new_tokens":99999999999999999999}}`,
	`{"input_ids":[1],"sampling_params":{"min_new_tokens":2,"min_new_tokens":null}}`,
	`{"input_ids":[1],"sampling_params":{"min_new_tokens":true}}`,
	`{"input_ids":[1],"sampling_params":{"n":"2","n":1}}`,
	`{"input_ids":[1],"sampling_params":{"n":2,"n":null}}`,
	`{"input_ids":[1],"sampling_params":{"N":3}}`,
	`{"input_ids":[1],"sampling_params":{"n":[2]}}`,
	`{"input_ids":[1],"sampling_params":{"regex":"a","REGEX":null}}`,
	`{"input_ids":[1],"sampling_params":{"regex":"a","ebnf":null}}`,
	`{"input_ids":[1],"sampling_params":{"json_schema":{},"temperature":0.5}}`,
	`{"input_ids":[1],"sampling_params":{"Structural_Tag":"x"}}`,
	`{"input_ids":[1],"sampling_params":{"stop":["a"],"temperature":0}}`,
	`{"input_ids":[1],"sampling_params":"x"}`,
	`{"input_ids":[1],"sampling_params":{}}`,
	"{\"input_ids\":[1],\"sampling_params\":{\"m\xc3\xa1x\":1,\"max_new_tokens\":3}}",
	`{"input_ids":[1],"sampling_params":{"max_new\u005ftokens":3}}`,
	`{"input_ids":[1]`,
	`{"input_ids":[1],}`,
	`[{"input_ids":[1]}]`,
	`null`,
	``,
	`  {"input_ids":[3]}  `,
	"{\"input_ids\"\n:\n[1,\n2] ,\t\"stream\" : true }",
}

func TestParseResumableScan(t *testing.T) {
	for _, body := range parseCases {
		checkParse(t, []byte(body))
	}
}

func FuzzParseResumableScan(f *testing.F) {
	for _, body := range parseCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkParse(t, body) })
}

// checkParse compares parseResumable with parseResumableJSON on body,
// and their continuations.
func checkParse(t *testing.T, body []byte) {
	t.Helper()
	got, gotWhy := parseResumable(readFields(body))
	want, wantWhy := parseResumableJSON(body)
	if gotWhy != wantWhy {
		t.Fatalf("%q: why %q, want %q", body, gotWhy, wantWhy)
	}
	if want == nil {
		return
	}
	type view struct {
		Prompt   []int64
		MaxNew   *int
		MinNew   int
		Stream   bool
		Sampling map[string]string
		Next     string
	}
	see := func(rs *resumeState) view {
		v := view{Prompt: rs.prompt, MaxNew: rs.maxNew, MinNew: rs.minNew, Stream: rs.stream != nil}
		rs.ids = []int64{7, 8}
		v.Next = string(rs.continuation()) // which may decode what the scan did not
		for k, raw := range rs.sampling {
			if v.Sampling == nil {
				v.Sampling = map[string]string{}
			}
			v.Sampling[k] = string(raw)
		}
		return v
	}
	if g, w := see(got), see(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%q:\n got %+v\nwant %+v", body, g, w)
	}
}

func BenchmarkParseResumable(b *testing.B) {
	ids := strings.Repeat("29889,", 255) + "2"
	body := []byte(`{"input_ids":[` + ids + `],"sampling_params":{"max_new_tokens":256,"temperature":1},"return_logprob":true}`)
	for _, bc := range []struct {
		name  string
		parse func([]byte) (*resumeState, string)
	}{
		{"scan", func(b []byte) (*resumeState, string) { return parseResumable(readFields(b)) }},
		{"json", parseResumableJSON},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, why := bc.parse(body); why != "" {
					b.Fatal(why)
				}
			}
		})
	}
}
