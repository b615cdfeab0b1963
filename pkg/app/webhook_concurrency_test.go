package app_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/internal/fakeopenai"
	"github.com/agentbus/agentbus/pkg/webhook"
)

// TestWebhookConcurrentChatsThroughPipeline (issue 37): on `agentbus up` with the webhook's
// default bounds, 200 chats posting one message each at the same moment are all accepted
// (before: 503 for most of them, from a limit of 16 requests in flight). The accepted share is
// printed.
func TestWebhookConcurrentChatsThroughPipeline(t *testing.T) {
	pl := newPipeline(t, fakeopenai.Echo, pipelineOpts{})
	const n = 200
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		b := private(fmt.Sprintf("cc-%d", i), fmt.Sprintf("chat%d", i), "hello from a busy minute").body()
		req, err := http.NewRequest(http.MethodPost, pl.p.WebhookURL+"/webhook/"+botID, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(botSecret, b))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code := -1
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("%d concurrent webhook senders on agentbus up: accepted %d (%.1f %%), codes %v", n, codes[http.StatusAccepted],
		100*float64(codes[http.StatusAccepted])/n, codes)
	if codes[http.StatusAccepted] != n {
		t.Fatalf("accepted %d of %d (codes %v), want all", codes[http.StatusAccepted], n, codes)
	}
}
