package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
)

// decodeStrict rejects unknown fields and trailing data, so a typo in an
// admin request is an error rather than a silent default.
func decodeStrict(body []byte, v any) error {
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
