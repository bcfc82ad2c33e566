package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// decodeStrict rejects unknown fields and trailing data, so a typo in an
// admin request is an error rather than a silent default.
func decodeStrict(body []byte, v any) error {
	if err := checkJSONText(body); err != nil {
		return err
	}
	if err := checkJSONKeys(body, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// checkJSONText rejects text that encoding/json would silently turn into
// U+FFFD: invalid UTF-8 and escapes of lone UTF-16 surrogates ("\ud800").
// Decoded, both would count as a different client ("\ufffd") than the one
// the caller named, where GET /check/%FF is refused.
func checkJSONText(body []byte) error {
	if !utf8.Valid(body) {
		return errors.New("body is not valid UTF-8")
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		// Outside a string a backslash is a syntax error the decoder
		// reports; inside one, it starts an escape of 2 or 6 bytes.
		n, err := escapeLen(body[i:])
		if err != nil {
			return err
		}
		i += n - 1
	}
	return nil
}

// escapeLen is the length of the escape at the start of b, which begins
// with a backslash: a surrogate pair counts as one 12-byte escape, a lone
// surrogate is an error.
func escapeLen(b []byte) (int, error) {
	r, ok := hexEscape(b)
	if !ok {
		return min(2, len(b)), nil // not \uXXXX: the decoder judges it
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, fmt.Errorf(`string escape \u%04x is a lone UTF-16 low surrogate, not a character`, r)
	case r >= 0xD800 && r <= 0xDBFF:
		if lo, ok := hexEscape(b[6:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
			return 12, nil
		}
		return 0, fmt.Errorf(`string escape \u%04x is a UTF-16 high surrogate without its low half, not a character`, r)
	}
	return 6, nil
}

// hexEscape reads a \uXXXX escape at the start of b.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// maxJSONDepth bounds the nesting of a JSON body: every body rlnode reads
// nests three levels at most.
const maxJSONDepth = 32

// checkJSONKeys walks a JSON body beside the Go type it decodes into and
// refuses what encoding/json would accept silently: a key given twice in
// one object (the last would win: "cost":1,"cost":1000) and a key that
// names a field only when case is ignored ("Cost" for "cost"), which a
// proxy or schema checking the exact name would not see. Syntax errors
// are left to the decoder.
func checkJSONKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	err := walkJSON(dec, t, "", 0)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func walkJSON(dec *json.Decoder, t reflect.Type, at string, depth int) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth == maxJSONDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", orBody(at), maxJSONDepth)
	}
	if d == '[' {
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkJSON(dec, elem, fmt.Sprintf("%s[%d]", at, i), depth+1); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		field := key
		if at != "" {
			field = at + "." + key
		}
		if seen[key] {
			return fmt.Errorf("field %q is given twice", field)
		}
		seen[key] = true
		ft, err := fieldType(t, key, field)
		if err != nil {
			return err
		}
		if err := walkJSON(dec, ft, field, depth+1); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// fieldType is the type of the struct field key names exactly (nil when
// t is not a struct or has no such field: the decoder reports unknown
// fields itself), or an error when key names one only by its case.
func fieldType(t reflect.Type, key, field string) (reflect.Type, error) {
	if t == nil {
		return nil, nil
	}
	if t.Kind() == reflect.Map {
		return t.Elem(), nil
	}
	if t.Kind() != reflect.Struct {
		return nil, nil
	}
	var folded string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type, nil
		}
		if strings.EqualFold(name, key) {
			folded = name
		}
	}
	if folded != "" {
		return nil, fmt.Errorf("field %q: names are case-sensitive; write %q", field, folded)
	}
	return nil, nil
}

func orBody(at string) string {
	if at == "" {
		return "body"
	}
	return at
}
