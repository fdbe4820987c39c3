package fakepolicy

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A native generation's tokens follow from everything before them: the
// same request continued from input_ids + a prefix of its output yields
// the rest of that output, with SGLang's answer fields.
func TestGenerateContinues(t *testing.T) {
	f, err := New(2, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 5000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type answer struct {
		Text      string  `json:"text"`
		OutputIDs []int64 `json:"output_ids"`
		Meta      struct {
			PromptTokens     int                   `json:"prompt_tokens"`
			CompletionTokens int                   `json:"completion_tokens"`
			FinishReason     struct{ Type string } `json:"finish_reason"`
			Logprobs         [][3]any              `json:"output_token_logprobs"`
			WeightVersion    string                `json:"weight_version"`
		} `json:"meta_info"`
	}
	generate := func(policy int, inputIDs []int64, n int) answer {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"input_ids": inputIDs, "return_logprob": true, "sampling_params": map[string]any{"max_new_tokens": n}})
		res, err := http.Post(f.URL(policy)+"/generate", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var a answer
		if err := json.NewDecoder(res.Body).Decode(&a); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("POST /generate: %d %v", res.StatusCode, err)
		}
		return a
	}
	prompt := []int64{11, 12, 13}
	whole := generate(0, prompt, 10)
	wantIDs, wantLPs := Continuation(prompt, 10)
	if !slices.Equal(whole.OutputIDs, wantIDs) || whole.Text != Detokenize(wantIDs) ||
		whole.Meta.PromptTokens != 3 || whole.Meta.CompletionTokens != 10 || whole.Meta.FinishReason.Type != "length" ||
		len(whole.Meta.Logprobs) != 10 || whole.Meta.WeightVersion != "default" {
		t.Fatalf("answer %+v; want output_ids %v, their text, 3 prompt and 10 completion tokens, length, 10 logprobs, version default", whole, wantIDs)
	}
	for i, lp := range whole.Meta.Logprobs {
		if lp[0] != wantLPs[i] || lp[1] != float64(wantIDs[i]) || lp[2] != nil {
			t.Errorf("output_token_logprobs[%d] = %v; want [%v, %d, null]", i, lp, wantLPs[i], wantIDs[i])
		}
	}
	rest := generate(1, append(slices.Clone(prompt), wantIDs[:4]...), 6)
	if !slices.Equal(rest.OutputIDs, wantIDs[4:]) || rest.Meta.PromptTokens != 7 {
		t.Errorf("continuation on another policy: output_ids %v, prompt_tokens %d; want %v, 7", rest.OutputIDs, rest.Meta.PromptTokens, wantIDs[4:])
	}
}
