package proxy

import "encoding/json"

// requestModel is the "model" of a JSON request body: what the OpenAI
// endpoints require, and SGLang's /generate leaves out (its server has
// one model). A body that is not a JSON object names none: the engine
// answers it. A "model" that is not a string is the client's error.
//
// It answers as decoding the body into struct{ Model json.RawMessage }
// with encoding/json would (keys matched without regard to case, the last
// one winning), from the body's scanned fields; values it cannot read
// exactly by bytes (escapes, non-ASCII), and bodies the scan could not
// read, go to encoding/json.
func requestModel(f *fields) (string, error) {
	if !f.valid {
		return "", nil
	}
	if !f.scanned {
		return requestModelJSON(f.raw)
	}
	return modelName(f.modelFold)
}

// requestModelJSON is requestModel by encoding/json alone.
func requestModelJSON(body []byte) (string, error) {
	var v struct {
		Model json.RawMessage `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil {
		return "", nil
	}
	return modelName(v.Model)
}

// modelName is the string of a "model" value raw (its JSON text), ""
// when absent or null; read by bytes when it holds no escape.
func modelName(raw []byte) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' && plainASCII(raw[1:len(raw)-1]) {
		return string(raw[1 : len(raw)-1]), nil
	}
	var model string
	if err := json.Unmarshal(raw, &model); err != nil {
		return "", fieldError("model", "must be a string")
	}
	return model, nil
}
