package queuecore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// liveClient is a client of the API named by QUEUECORE_URL. Without it the test is skipped;
// with it, an API that does not answer fails the test.
func liveClient(t *testing.T, opts ...queuecore.Option) *queuecore.Client {
	t.Helper()
	if os.Getenv("QUEUECORE_URL") == "" {
		t.Skip("QUEUECORE_URL is not set: no API to test against")
	}
	client, err := queuecore.New(append([]queuecore.Option{queuecore.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Health(ctx); err != nil {
		t.Fatalf("QUEUECORE_URL=%s does not answer: %v", os.Getenv("QUEUECORE_URL"), err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// unique is a name no other test uses.
func unique(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
