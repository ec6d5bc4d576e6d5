package queuecore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// The README's examples: its snippets are these functions' bodies, and go test runs them
// against the API named by QUEUECORE_URL with the key in QUEUECORE_API_KEY.

func ExampleNew() {
	// The API key and URL come from QUEUECORE_API_KEY and QUEUECORE_URL.
	pq, err := queuecore.New(queuecore.WithTimeout(10*time.Second), queuecore.WithMaxRetries(3))
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Close()
	health, err := pq.Health(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(health["status"])
	// Output: ok
}

func ExampleTopics() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	topic, err := pq.Topics.Create(ctx, queuecore.TopicConfig{
		Name:       "order.events",
		Retention:  "30d",
		Delivery:   "exactly-once",
		Partitions: queuecore.Int(6),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(topic.Name, topic.Partitions, topic.Status)
	topics, err := pq.Topics.List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(topics) > 0)
	deleted, err := pq.Topics.Delete(ctx, "order.events")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(deleted.Status)
	// Output:
	// order.events 6 active
	// true
	// deleting
}

func ExampleClient_Publish() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = pq.Topics.Create(ctx, queuecore.TopicConfig{Name: "invoices", Partitions: queuecore.Int(1)})
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Topics.Delete(ctx, "invoices")

	// Idempotent by default: a retried publish is stored once.
	result, err := pq.Publish(ctx, "invoices", map[string]any{"type": "invoice.paid", "amount": 9900},
		queuecore.WithKey("cus_42"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result.Offset, result.Partition)

	batch, err := pq.PublishBatch(ctx, "invoices", []queuecore.OutgoingMessage{
		{Data: map[string]any{"type": "invoice.created", "amount": 4500}},
		{Data: map[string]any{"type": "invoice.created", "amount": 12000}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(batch.Count, batch.Results[1].Offset)
	// Output:
	// 0 0
	// 2 2
}

func ExampleClient_Consume() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = pq.Topics.Create(ctx, queuecore.TopicConfig{Name: "signups", Partitions: queuecore.Int(1)})
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Topics.Delete(context.Background(), "signups")
	_, err = pq.PublishBatch(ctx, "signups", []queuecore.OutgoingMessage{
		{Data: map[string]string{"email": "ada@example.com"}},
		{Data: map[string]string{"email": "alan@example.com"}},
	})
	if err != nil {
		log.Fatal(err)
	}

	consumer, err := pq.Consume(ctx, "signups", "welcome-mails", queuecore.ConsumeOptions{
		StartFrom:  "earliest",
		DeadLetter: &queuecore.DeadLetterPolicy{MaxRetries: queuecore.Int(5), RetryDelay: 30 * time.Second},
		OnEvent:    func(e queuecore.Event) { log.Println("consumer", e.Kind) },
	})
	if err != nil {
		log.Fatal(err)
	}
	handled := 0
	err = consumer.Run(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		var signup struct{ Email string }
		// msg.Encoding is "base64" when a Kafka client produced a value that was not JSON
		if err := msg.Decode(&signup); err != nil {
			return err // nacked with the error's text
		}
		fmt.Println(msg.Offset, signup.Email)
		if err := msg.Ack(ctx); err != nil {
			return err
		}
		if handled++; handled == 2 {
			cancel() // the consumer leaves its group and Run returns
		}
		return nil
	})
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// 0 ada@example.com
	// 1 alan@example.com
	// true
}

func ExampleDLQ() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = pq.Topics.Create(ctx, queuecore.TopicConfig{Name: "payments", Partitions: queuecore.Int(1)})
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Topics.Delete(ctx, "payments")
	sent, err := pq.Publish(ctx, "payments", map[string]int{"amount": -1})
	if err != nil {
		log.Fatal(err)
	}

	// No retries: the first failure dead-letters the message.
	consumer, err := pq.Consume(ctx, "payments", "charges", queuecore.ConsumeOptions{
		StartFrom:  "earliest",
		DeadLetter: &queuecore.DeadLetterPolicy{MaxRetries: queuecore.Int(0)},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		return errors.New("card declined")
	})
	if err != nil {
		log.Fatal(err)
	}
	for {
		page, err := pq.DLQ.Inspect(ctx, "payments", "charges", queuecore.InspectOptions{Limit: 10})
		if err != nil {
			log.Fatal(err)
		}
		if page.Depth > 0 {
			fmt.Println(page.Messages[0].MessageID == sent.MessageID, page.Messages[0].Error)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := consumer.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	replayed, err := pq.DLQ.ReplayAll(ctx, "payments", "charges")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(replayed)
	// Output:
	// true card declined
	// 1
}

func ExampleRuntimeConfig() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	assign := `function on_enqueue(msg) return {fairness_key = msg.headers["tenant"]} end`
	_, err = pq.Topics.Create(ctx, queuecore.TopicConfig{Name: "mail.jobs", Partitions: queuecore.Int(1), OnEnqueue: assign})
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Topics.Delete(ctx, "mail.jobs")
	fair := queuecore.GroupSettings{StartFrom: "earliest", Fairness: &queuecore.Fairness{Weights: map[string]int{"vip": 3}}}
	if _, err := pq.ConsumerGroups.Configure(ctx, "mail.jobs", "senders", fair); err != nil {
		log.Fatal(err)
	}
	if _, err := pq.Config.Set(ctx, "throttle.emails.rate", "50"); err != nil { // across every replica
		log.Fatal(err)
	}
	var messages []queuecore.OutgoingMessage
	for n := 0; n < 100; n++ {
		tenant := map[string]string{"tenant": "acme"}
		messages = append(messages, queuecore.OutgoingMessage{Data: n, Headers: tenant, ThrottleKeys: []string{"emails"}})
	}
	vip := "vip"
	messages = append(messages, queuecore.OutgoingMessage{Data: 0, FairnessKey: &vip})
	if _, err := pq.PublishBatch(ctx, "mail.jobs", messages); err != nil {
		log.Fatal(err)
	}
	stats, err := pq.ConsumerGroups.Stats(ctx, "mail.jobs", "senders")
	if err != nil {
		log.Fatal(err)
	}
	for _, key := range stats.PerKey {
		fmt.Println(key.Key, key.Pending, key.Weight)
	}
	replayed, err := pq.DLQ.ReplayCount(ctx, "mail.jobs", "senders", 10) // at most 10, oldest first
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(replayed, stats.PerThrottle[0].RatePerSecond)
	// Output:
	// acme 100 1
	// vip 1 3
	// 0 50
}

func ExampleOffsets() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = pq.Topics.Create(ctx, queuecore.TopicConfig{Name: "ledger", Partitions: queuecore.Int(1)})
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Topics.Delete(ctx, "ledger")
	for i := 0; i < 3; i++ {
		if _, err := pq.Publish(ctx, "ledger", i); err != nil {
			log.Fatal(err)
		}
	}
	_, err = pq.ConsumerGroups.Configure(ctx, "ledger", "audit", queuecore.GroupSettings{StartFrom: "earliest"})
	if err != nil {
		log.Fatal(err)
	}

	offset, err := pq.Offsets.Get(ctx, "ledger", "audit", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(offset.Current, offset.Latest, offset.Lag)
	offset, err = pq.Offsets.Seek(ctx, "ledger", "audit", 0, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(offset.Current, offset.Lag)
	reset, err := pq.Offsets.Reset(ctx, "ledger", "audit", queuecore.ResetLatest)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reset[0].Current, reset[0].Lag)
	// Output:
	// 0 3 3
	// 2 1
	// 3 0
}

func ExamplePushConfig() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = pq.Topics.Create(ctx, queuecore.TopicConfig{Name: "signups", Partitions: queuecore.Int(1)})
	if err != nil {
		log.Fatal(err)
	}
	defer pq.Topics.Delete(ctx, "signups")

	// The endpoint: your web handler (here on 127.0.0.1, which make dev allows; production
	// endpoints are https). Verify the raw body before anything else; a 2xx acks the message.
	var secret string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		push, err := queuecore.VerifyPush(secret, r.Header, body) // signature, at most 5 min old
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized) // not from QueueCore, or replayed
			return
		}
		fmt.Println(push.Event, push.Topic, push.Attempt, string(push.Data)) // your work here
		w.WriteHeader(http.StatusNoContent)
	})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer listener.Close()
	go http.Serve(listener, handler)

	group, err := pq.ConsumerGroups.Configure(ctx, "signups", "welcome-fn", queuecore.GroupSettings{
		Push: &queuecore.PushConfig{Endpoint: "http://" + listener.Addr().String() + "/queuecore", MaxInFlight: 10, Timeout: 30 * time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	secret = group.PushSecret                                               // shown once: keep it where your handler reads it
	result, err := pq.ConsumerGroups.TestPush(ctx, "signups", "welcome-fn") // a signed push.test event
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("test push delivered:", result.Delivered, *result.StatusCode)
	// Output:
	// push.test signups 1 {"test":true,"message":"a test push from QueueCore"}
	// test push delivered: true 204
}

func ExampleError() {
	ctx := context.Background()
	pq, err := queuecore.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = pq.Topics.Describe(ctx, "no.such.topic")
	var apiErr *queuecore.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code, apiErr.RequestID != "")
	}
	// Output: 404 TOPIC_NOT_FOUND true
}
