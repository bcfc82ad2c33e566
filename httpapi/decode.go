package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// decodeStrict rejects unknown fields and trailing data, so a typo in an
// admin request is an error rather than a silent default.
func decodeStrict(body []byte, v any) error {
	if err := checkJSONText(body); err != nil {
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
