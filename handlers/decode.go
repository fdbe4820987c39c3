package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/routing"
)

// newValidator returns a validator that names fields by their json tags.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	// Names come from the one table of engines and of routers.
	for tag, names := range choiceTags {
		err := v.RegisterValidation(tag, func(fl validator.FieldLevel) bool {
			return slices.Contains(names, fl.Field().String())
		})
		if err != nil {
			panic("handlers: register " + tag + ": " + err.Error())
		}
	}
	err := v.RegisterValidation("session_key", func(fl validator.FieldLevel) bool {
		return routing.CheckSession("", fl.Field().String()) == nil
	})
	if err != nil {
		panic("handlers: register session_key: " + err.Error())
	}
	// The rules of the requests a table checks, for that table's test
	// and any caller of validateTags.
	for _, t := range hotTables {
		zero, rules := t.validatorRules()
		v.RegisterStructValidationMapRules(rules, zero)
	}
	return v
}

// choiceTags are the validation tags of names from a table: the field is
// one of the names.
var choiceTags = map[string][]string{
	"engine":        engine.Names(),
	"select_router": routing.SelectRouterNames(),
	"assign_router": routing.AssignRouterNames(),
	"release_mode":  routing.ReleaseModeNames,
}

// decode reads a JSON body into dst and checks it: the one way every
// request is decoded and checked. A request with a table (requests.go:
// /select, /release, /assign) is read by the fast decoder when it can be
// and checked by its table; every other by encoding/json and its validate
// tags. Malformed JSON is 400, a body over limit 413, a wrong content type
// 415, and unknown fields, wrong types and invalid values 422 with every
// bad field named.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	var ct string
	if v := r.Header["Content-Type"]; len(v) > 0 { // Header.Get, without checking the key's case
		ct = v[0]
	}
	if ct == "application/json" {
		// The common case, without parsing.
	} else if ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errorf(api.CodeUnsupportedMedia, "request body must be JSON: send Content-Type: application/json")
		}
	} else {
		// Browsers cannot send a JSON content type cross-site without a
		// preflight; requiring it keeps web pages from driving an open
		// router on loopback.
		return errorf(api.CodeUnsupportedMedia, "missing Content-Type: send Content-Type: application/json")
	}
	hot := hotTableOf(dst)
	body := r.Body
	if hot != nil {
		b, ok, rest, done := readSmall(r.Body, limit)
		defer done()
		if ok && hot.decodeFast(b, dst) {
			return hot.checkAny(dst)
		}
		if ok {
			rest = bytes.NewReader(b)
		}
		// encoding/json reads the same bytes, for the same answer.
		body = io.NopCloser(rest)
	}
	var read bytes.Buffer // to name an unknown field by its path
	dec := json.NewDecoder(io.TeeReader(http.MaxBytesReader(w, body, limit), &read))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return unknownFieldAt(decodeError(err, limit), read.Bytes(), dst)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return decodeError(err, limit)
		}
		return errorf(api.CodeBadRequest, "request body must be a single JSON value")
	}
	if hot != nil {
		return hot.checkAny(dst)
	}
	return s.validateTags(dst)
}

func decodeError(err error, limit int64) error {
	var (
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
		tooBig  *http.MaxBytesError
	)
	switch {
	case errors.As(err, &tooBig):
		return errorf(api.CodeTooLarge, fmt.Sprintf("request body exceeds %d bytes", limit))
	case errors.As(err, &syntax):
		return errorf(api.CodeBadRequest, fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err))
	case errors.Is(err, io.EOF):
		return errorf(api.CodeBadRequest, "request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(api.CodeBadRequest, "malformed JSON: unexpected end of body")
	case errors.Is(err, prefix.ErrHashForm) ||
		errors.As(err, &typeErr) && typeErr.Type == reflect.TypeFor[prefix.Hash]():
		// The one field of hashes in every request that has one.
		return fieldError("prefix_hashes", prefixHashesForm)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return errorf(api.CodeBadRequest, fmt.Sprintf("request body must be a JSON object, not %s", typeErr.Value))
		}
		return fieldError(field, fmt.Sprintf("must be %s, not %s", jsonKind(typeErr.Type), typeErr.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if name == "topology" {
			return fieldError(name, "is not a known field here; PUT /registration takes policies and topology together")
		}
		return fieldError(name, "is not a known field")
	default:
		return errorf(api.CodeBadRequest, "malformed JSON: "+err.Error())
	}
}

// prefixHashesForm says what prefix_hashes must be.
const prefixHashesForm = "must be an array of block hashes, each a string of 16 lowercase hex digits"

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "a " + t.String()
	}
}

// validateTags runs the struct's validate tags and renders failures as one
// 422 naming every bad field.
func (s *Server) validateTags(v any) error {
	if rv := reflect.Indirect(reflect.ValueOf(v)); rv.Kind() != reflect.Struct {
		return nil // maps (the topology) are checked by their consumer
	}
	err := s.validator.Struct(v)
	if err == nil {
		return nil
	}
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) {
		return err
	}
	fields := make(map[string]string, len(verrs))
	var first string
	for _, fe := range verrs {
		name := fe.Namespace()
		if _, rest, ok := strings.Cut(name, "."); ok {
			name = rest // drop the top-level type name
		}
		fields[name] = describe(fe)
		if first == "" {
			first = name + " " + fields[name]
		}
	}
	return &Error{Code: api.CodeValidationFailed, Message: "invalid request: " + first, Fields: fields}
}

// describe says what a validation tag wants, in words.
func describe(fe validator.FieldError) string {
	counted := fe.Kind() == reflect.Slice || fe.Kind() == reflect.Map || fe.Kind() == reflect.String
	switch fe.Tag() {
	case "required":
		return "is required"
	case "required_without":
		return "is required when " + snakeCase(fe.Param()) + " is absent"
	case "min":
		if counted {
			return "must have at least " + fe.Param() + " entries or characters"
		}
		return "must be >= " + fe.Param()
	case "max":
		if counted {
			return "must have at most " + fe.Param() + " entries or characters"
		}
		return "must be <= " + fe.Param()
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case "session_key":
		return "must be at most " + strconv.Itoa(routing.MaxSessionBytes) + " bytes"
	case "http_url":
		return "must be an absolute http or https URL"
	case "uuid":
		return "must be a UUID"
	case "printascii":
		return "must be printable ASCII"
	case "excludesall":
		return "must not contain any of " + fe.Param()
	default:
		if names, ok := choiceTags[fe.Tag()]; ok {
			return "must be " + routing.NameList(names)
		}
		return "is invalid (" + fe.Tag() + ")"
	}
}

// snakeCase turns a Go field name into its JSON name in this API:
// LeaseID -> lease_id, Index -> index.
func snakeCase(name string) string {
	var b strings.Builder
	for i, r := range name {
		upper := r >= 'A' && r <= 'Z'
		if upper && i > 0 {
			prev := rune(name[i-1])
			nextLower := i+1 < len(name) && name[i+1] >= 'a' && name[i+1] <= 'z'
			if (prev >= 'a' && prev <= 'z') || (prev >= 'A' && prev <= 'Z' && nextLower) {
				b.WriteByte('_')
			}
		}
		if upper {
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// checkPolicyURL refuses URLs the poller should not call: other schemes,
// embedded credentials, queries or fragments.
func checkPolicyURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldError(field, "must be an absolute http or https URL")
	}
	if u.User != nil {
		return fieldError(field, "must not contain credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fieldError(field, "must not contain a query or fragment; /idle is appended to it")
	}
	return nil
}
