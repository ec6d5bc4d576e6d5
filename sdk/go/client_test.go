package queuecore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

func TestNewNeedsAnAPIKey(t *testing.T) {
	t.Setenv("QUEUECORE_API_KEY", "")
	if _, err := queuecore.New(); err == nil || !strings.Contains(err.Error(), "QUEUECORE_API_KEY") {
		t.Fatalf("want an error naming QUEUECORE_API_KEY, got %v", err)
	}
}

func TestNewReadsTheEnvironmentAndNeverShowsTheKey(t *testing.T) {
	t.Setenv("QUEUECORE_API_KEY", "pq_live_sk_secretsecretsecretsecretsecret12")
	t.Setenv("QUEUECORE_URL", "http://queuecore.internal:9000/")
	client, err := queuecore.New()
	if err != nil {
		t.Fatal(err)
	}
	shown := client.String()
	if !strings.Contains(shown, "http://queuecore.internal:9000") || strings.Contains(shown, "secret") {
		t.Fatalf("the client shows its URL, never its key: %s", shown)
	}
}

func TestIdempotencyKeysAreFreshPerCall(t *testing.T) {
	a, b := queuecore.NewIdempotencyKey(), queuecore.NewIdempotencyKey()
	if a == b || len(a) != len("sdk_")+32 || !strings.HasPrefix(a, "sdk_") {
		t.Fatalf("unexpected keys %q %q", a, b)
	}
}

func TestABatchOfMoreThanAThousandIsRefusedBeforeSending(t *testing.T) {
	client, err := queuecore.New(queuecore.WithAPIKey("pq_test_sk_x"), queuecore.WithBaseURL("http://127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.PublishBatch(context.Background(), "t", make([]queuecore.OutgoingMessage, 1001))
	if err == nil || !strings.Contains(err.Error(), "1 to 1000") {
		t.Fatalf("want the batch size error, got %v", err)
	}
}

func TestBatchAckSettlesEveryMessage(t *testing.T) {
	client := liveClient(t)
	topic := newTopic(t, client, 1)
	ctx := testContext(t, 60*time.Second)
	batch := []queuecore.OutgoingMessage{{Data: 1}, {Data: 2}, {Data: 3}}
	if _, err := client.PublishBatch(ctx, topic, batch); err != nil {
		t.Fatal(err)
	}
	consumer, err := client.Consume(ctx, topic, "g", queuecore.ConsumeOptions{StartFrom: "earliest", Pull: true, BatchSize: 3, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []*queuecore.Message
	if err := consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, msg)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	eventually(t, 20*time.Second, "three messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 3 })
	mu.Lock()
	refused, err := consumer.Ack(ctx, held)
	mu.Unlock()
	if err != nil || len(refused) != 0 || !held[2].Settled() {
		t.Fatalf("all acked in one request: refused %v, err %v", refused, err)
	}
	offset, err := client.Offsets.Get(ctx, topic, "g", 0)
	if err != nil || offset.Current != 3 || offset.Lag != 0 {
		t.Fatalf("the group is past all three: %+v %v", offset, err)
	}
}
