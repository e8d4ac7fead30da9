package daemon

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/a2ad/a2ad/internal/audit"
	"github.com/a2ad/a2ad/internal/metrics"
	"github.com/a2ad/a2ad/task"
	"github.com/nats-io/nats.go/jetstream"
)

// storageMonitor watches the JetStream store a2ad writes to and keeps
// room in it for the tasks already delegated (docs/isolation.md): when
// less than reserve bytes are left for task records, new delegations are
// refused ([storageMonitor.Admit]) while answers, cancels, deadlines and
// completions of existing tasks go on writing into the reserve.
//
// Room is the store's capacity less what every stream of the account
// holds, a stream with max_bytes counted at its max_bytes (an agent's
// events stream may fill up to it at any time). The capacity is the
// embedded server's max store, or on an external NATS the account's
// JetStream max_file limit; with neither (an account without limits) it
// is unknown, and a2ad refuses delegations only once JetStream has
// refused a write for lack of room.
type storageMonitor struct {
	js       jetstream.JetStream
	capacity int64 // the embedded server's max store; 0: the account's limit, if any
	reserve  int64
	log      *slog.Logger

	mu     sync.Mutex
	snap   storageSnapshot
	fullAt time.Time // when a write was last refused for lack of room
	wasLow bool      // the last poll found room below the reserve (for the log)
}

// storageSnapshot is what one poll found.
type storageSnapshot struct {
	at        time.Time
	capacity  int64 // 0: unknown
	committed int64 // bytes the streams hold or have reserved
	streams   []metrics.StreamUsage
	err       error
}

// storagePoll is how often the store is looked at.
const storagePoll = 2 * time.Second

func newStorageMonitor(js jetstream.JetStream, capacity, reserve int64, log *slog.Logger) *storageMonitor {
	return &storageMonitor{js: js, capacity: capacity, reserve: reserve, log: log}
}

// run polls until ctx ends.
func (m *storageMonitor) run(ctx context.Context) {
	t := time.NewTicker(storagePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.poll(ctx)
		}
	}
}

// poll reads the account's streams (and, without a known capacity, its
// limits) once.
func (m *storageMonitor) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sn := storageSnapshot{at: time.Now(), capacity: m.capacity}
	if sn.capacity == 0 {
		if ai, err := m.js.AccountInfo(ctx); err != nil {
			sn.err = err
		} else if ai.Limits.MaxStore > 0 {
			sn.capacity = ai.Limits.MaxStore
		}
	}
	if sn.err == nil {
		l := m.js.ListStreams(ctx)
		for info := range l.Info() {
			r := int64(max(1, info.Config.Replicas))
			if info.Config.MaxBytes > 0 && info.Config.Storage == jetstream.FileStorage {
				sn.committed += r * info.Config.MaxBytes
			} else if info.Config.Storage == jetstream.FileStorage {
				sn.committed += r * int64(info.State.Bytes)
			}
			if ours(info.Config.Name) {
				sn.streams = append(sn.streams, metrics.StreamUsage{Name: info.Config.Name, Bytes: info.State.Bytes,
					Messages: info.State.Msgs, MaxBytes: info.Config.MaxBytes})
			}
		}
		sn.err = l.Err()
	}
	m.mu.Lock()
	m.snap = sn
	low := sn.err == nil && sn.capacity > 0 && sn.capacity-sn.committed < m.reserve
	changed := low != m.wasLow
	m.wasLow = low
	m.mu.Unlock()
	switch {
	case changed && low:
		m.log.Warn("JetStream store nearly full: new delegations are refused until room is made", "room_bytes", sn.capacity-sn.committed,
			"reserve_bytes", m.reserve, "capacity_bytes", sn.capacity)
	case changed:
		m.log.Info("JetStream store has room again: delegations are accepted", "room_bytes", sn.capacity-sn.committed)
	}
}

// ours reports whether a stream is one of a2ad's (its buckets, its events
// and audit streams), shown per stream in /metrics.
func ours(name string) bool {
	return strings.HasPrefix(name, "A2AD_") || strings.HasPrefix(name, "KV_a2ad_")
}

// errStorageLow is the refusal of a delegation for lack of room.
var errStorageLow = fmt.Errorf("%w: a2ad keeps the rest of its store for the tasks already delegated", task.ErrUnavailable)

// Admit implements broker.Admission: nil while there is room for new
// tasks, else an error wrapping task.ErrUnavailable. A poll that failed
// does not stop delegations: JetStream itself still refuses what does
// not fit.
func (m *storageMonitor) Admit() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fullAt.After(m.snap.at) {
		return errStorageLow
	}
	if m.snap.err == nil && m.snap.capacity > 0 && m.snap.capacity-m.snap.committed < m.reserve {
		return errStorageLow
	}
	return nil
}

// Full implements broker.Admission: JetStream refused a write for lack of
// room, so delegations are refused until a poll a little later finds room.
func (m *storageMonitor) Full() {
	m.mu.Lock()
	m.fullAt = time.Now()
	m.mu.Unlock()
}

// status is the /readyz storage field and whether delegations are
// accepted.
func (m *storageMonitor) status() (string, bool) {
	err := m.Admit()
	m.mu.Lock()
	sn := m.snap
	m.mu.Unlock()
	switch {
	case err != nil && sn.capacity > 0:
		return fmt.Sprintf("low: %d bytes of %d left for tasks, below the reserve of %d: new delegations are refused", max(0, sn.capacity-sn.committed), sn.capacity, m.reserve), false
	case err != nil:
		return "full: JetStream refused a write for lack of room: new delegations are refused", false
	case sn.err != nil:
		return "not checked: " + sn.err.Error(), true
	case sn.capacity == 0:
		return "ok (capacity unknown: the account has no JetStream storage limit)", true
	}
	return "ok", true
}

// report is what /metrics shows.
func (m *storageMonitor) report() metrics.StorageReport {
	_, accepting := m.status()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := metrics.StorageReport{Streams: m.snap.streams, Capacity: m.snap.capacity, Accepting: accepting}
	if m.snap.capacity > 0 {
		r.Room = max(0, m.snap.capacity-m.snap.committed)
	}
	return r
}

// tasksMinimum is the least room for task records and a2ad's small buckets
// a store must have beyond its reservations and the reserve: with less,
// a2ad could never accept a delegation.
const tasksMinimum = 16 << 20

// checkSizing refuses a configuration whose reservations do not fit a
// store of capacity bytes (0: unknown, nothing to check), replicas
// counting as a NATS account without tiers counts them: the audit
// stream's max_bytes, every configured agent's max_pending_bytes,
// storage.reserve_bytes and tasksMinimum for the task records. a2ad would
// otherwise start and refuse every delegation, or fail half-way through
// creating its streams with JetStream's own words.
func checkSizing(cfg Config, capacity int64, where string) error {
	if capacity <= 0 {
		return nil
	}
	r := int64(max(1, cfg.Replicas))
	auditBytes := cfg.Audit.MaxBytes
	if auditBytes == 0 {
		auditBytes = audit.DefaultMaxBytes
	}
	auditBytes = max(auditBytes, 0)
	var agents int64
	for _, a := range cfg.Agents {
		agents += a.Limits.Or(cfg.AgentLimits).Or(DefaultAgentLimits).MaxPendingBytes
	}
	reserve := cmp.Or(cfg.Storage.ReserveBytes, DefaultStorageReserve)
	need := r*(auditBytes+agents+tasksMinimum) + reserve
	if need <= capacity {
		return nil
	}
	return fmt.Errorf("config: %s is %d bytes, less than the configuration needs: %d = replicas %d × (audit.max_bytes %d + max_pending_bytes of %d agents %d + %d for task records) + storage.reserve_bytes %d; "+
		"raise it, or lower audit.max_bytes, agent_limits.max_pending_bytes or storage.reserve_bytes (docs/isolation.md)",
		where, capacity, need, r, auditBytes, len(cfg.Agents), agents, tasksMinimum, reserve)
}
