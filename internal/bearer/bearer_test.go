package bearer

import "testing"

func TestValid(t *testing.T) {
	for _, c := range []struct {
		header string
		want   bool
	}{
		{"Bearer s3cret", true},
		{"Bearer s3cre", false},
		{"Bearer s3cret ", false},
		{"bearer s3cret", false},
		{"s3cret", false},
		{"", false},
	} {
		if got := Valid(c.header, "s3cret"); got != c.want {
			t.Errorf("Valid(%q) = %v, want %v", c.header, got, c.want)
		}
	}
}
