package queuecore_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs the examples only when there is an API to run them against: they talk to
// the server named by QUEUECORE_URL, exactly as the README shows them.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("QUEUECORE_URL") == "" && flag.Lookup("test.run").Value.String() == "" {
		fmt.Println("QUEUECORE_URL is not set: running the tests that need no API only")
		_ = flag.Set("test.run", "^Test")
	}
	os.Exit(m.Run())
}
