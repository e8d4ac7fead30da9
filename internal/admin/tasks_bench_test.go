package admin

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/a2ad/a2ad/task"
)

// BenchmarkAdminListTasks lists one page of 50 filtered tasks out of 20,000
// stored in an embedded NATS bucket, through the HTTP API.
func BenchmarkAdminListTasks(b *testing.B) {
	const n = 20_000
	a := newAPI(b)
	base := time.Now().Add(-48 * time.Hour).UTC()
	tenants := []string{"acme", "globex"}
	stateOf := []task.State{task.Working, task.Completed, task.InputRequired, task.Failed}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				created := base.Add(time.Duration(i) * time.Second)
				r := &task.Record{ID: fmt.Sprintf("tsk-%05d", i), Tenant: tenants[i%2], Subject: "host-1",
					AgentID: "fraud-review", Skill: "assess", State: stateOf[(i/2)%4], Turns: 1,
					Deadline: created.Add(time.Hour), CreatedAt: created, UpdatedAt: created,
					History: []task.Transition{{At: created, To: task.Submitted, Event: "submit", Source: task.SourceHost}}}
				if err := a.store.Create(context.Background(), r); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var p TaskPage
		if code := a.do("GET", "/v1/tasks?state=working&tenant=acme&limit=50", "", &p); code != http.StatusOK || len(p.Tasks) != 50 || p.NextPageToken == "" {
			b.Fatalf("status %d, %d tasks, token %q", code, len(p.Tasks), p.NextPageToken)
		}
	}
}
