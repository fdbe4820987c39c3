package handlers

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// unknownFieldAt names an unknown field by its full path in the request
// (`selector.index`, `policies[2].foo`), not by its key alone as
// encoding/json does: e is decodeError's answer, raw the bytes decoded
// (the first JSON value is read) and dst the request they went into.
// Other errors, and a key not found again, are returned as they are.
func unknownFieldAt(e error, raw []byte, dst any) error {
	fe, ok := e.(*Error)
	if !ok || len(fe.Fields) != 1 {
		return e
	}
	var name, msg string
	for k, m := range fe.Fields {
		name, msg = k, m
	}
	if !strings.HasPrefix(msg, "is not a known field") {
		return e
	}
	var v any
	if json.NewDecoder(bytes.NewReader(raw)).Decode(&v) != nil {
		return e
	}
	var paths []string
	unknownPaths(v, reflect.TypeOf(dst), "", name, &paths)
	if len(paths) == 0 || paths[0] == name {
		return e
	}
	// Document order is lost in a map: the least path is as good a
	// choice, and the same on every run.
	slices.Sort(paths)
	return fieldError(paths[0], msg)
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// unknownPaths appends to out the path of each key called name in v that
// the type t has no field for.
func unknownPaths(v any, t reflect.Type, at, name string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return // it decodes itself
	}
	switch v := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, e := range v {
				unknownPaths(e, t.Elem(), join(at, k), name, out)
			}
		case reflect.Struct:
			for k, e := range v {
				f, ok := jsonField(t, k)
				if !ok {
					if k == name {
						*out = append(*out, join(at, k))
					}
					continue
				}
				unknownPaths(e, f.Type, join(at, k), name, out)
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range v {
				unknownPaths(e, t.Elem(), at+"["+strconv.Itoa(i)+"]", name, out)
			}
		}
	}
}

// jsonField finds the field encoding/json decodes key into: by its json
// name, or Go name when it has none, case-insensitively, through embedded
// structs.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			continue // its fields are visible themselves
		}
		if tag == "" {
			tag = f.Name
		}
		if strings.EqualFold(tag, key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}
