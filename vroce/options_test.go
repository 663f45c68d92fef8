package vroce_test

import (
	"strings"
	"testing"

	"vroce.dev/vroce"
)

func TestOptionsAs(t *testing.T) {
	type opts struct{ N int }
	for _, tc := range []struct {
		in   any
		want int
	}{{nil, 0}, {opts{3}, 3}, {&opts{4}, 4}, {(*opts)(nil), 0}} {
		got, err := vroce.OptionsAs[opts]("p", tc.in)
		if err != nil || got.N != tc.want {
			t.Errorf("%#v: %+v, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	if _, err := vroce.OptionsAs[opts]("p", 42); err == nil || !strings.Contains(err.Error(), "p: options of type int") {
		t.Errorf("an int: %v", err)
	}
}
