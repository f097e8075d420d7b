package memprofile

import "testing"

func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"PATH=/bin", "FELIX_DEBUGHOST=127.0.0.1"}, false},
		{[]string{"FELIX_DEBUGPORT="}, false},
		{[]string{"FELIX_DEBUGPORT=0"}, false},
		{[]string{"FELIX_DEBUGPORT=6060"}, true},
		{[]string{"FELIX_debugPort=6060"}, true},
		{[]string{"felix_debugport=6060"}, false}, // the prefix is upper case, as felixenv has it
		{[]string{"GODEBUG=madvdontneed=1,memprofilerate=1"}, true},
		{[]string{"GODEBUG=madvdontneed=1"}, false},
	} {
		if got := Wanted(tc.env); got != tc.want {
			t.Errorf("Wanted(%q) = %v, want %v", tc.env, got, tc.want)
		}
	}
}
