// Command testconsumer consumes a topic with the Go SDK and prints one JSON line per
// processed message, per accepted ack and per connection event, until SIGTERM or SIGINT.
//
// It is driven by the kill-and-restart test: the line "acked" is printed only after the
// server accepted the ack, so a killed process never reports an ack it did not get.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func say(fields map[string]any) {
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(fields)
}

func main() {
	topic := flag.String("topic", "", "topic to consume")
	group := flag.String("group", "", "consumer group")
	pull := flag.Bool("pull", false, "long-poll instead of streaming")
	session := flag.Duration("session-timeout", 0, "this member's session timeout (0: the group's)")
	flag.Parse()
	client, err := queuecore.New(queuecore.WithTimeout(5 * time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	consumer, err := client.Consume(ctx, *topic, *group, queuecore.ConsumeOptions{
		Pull:           *pull,
		SessionTimeout: *session,
		OnEvent:        func(e queuecore.Event) { say(map[string]any{"event": string(e.Kind), "member": e.MemberID}) },
		OnError:        func(err error) { say(map[string]any{"event": "error", "error": err.Error()}) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go func() {
		<-ctx.Done()
		_ = consumer.Close()
	}()
	if err := consumer.Run(context.Background(), handle); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func handle(ctx context.Context, msg *queuecore.Message) error {
	where := map[string]any{"partition": msg.Partition, "offset": msg.Offset, "attempt": msg.Attempt}
	say(merge(where, "processed"))
	if err := msg.AckWithResult(ctx); err != nil { // the server's verdict, not just queued
		say(merge(where, "ack_failed", "error", err.Error()))
		return nil // not nacked: the lease runs out and the group delivers it again
	}
	say(merge(where, "acked"))
	return nil
}

func merge(fields map[string]any, event string, more ...string) map[string]any {
	line := map[string]any{"event": event}
	for k, v := range fields {
		line[k] = v
	}
	for i := 0; i+1 < len(more); i += 2 {
		line[more[i]] = more[i+1]
	}
	return line
}
