package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/jsretry"
	"github.com/nats-io/nats.go/jetstream"
)

// SchemasBucket archives every host schema version a2ad has put in force,
// by digest, so a task is validated against the version it was delegated
// with after a reload and a restart, on any instance.
const SchemasBucket = "a2ad_schemas"

// schemaArchive is the artifact.Archive in SchemasBucket, under keys
// "sha256.<hex>" (KV keys cannot hold ':').
type schemaArchive struct {
	kv jetstream.KeyValue
}

func newSchemaArchive(ctx context.Context, js jetstream.JetStream, replicas int) (*schemaArchive, error) {
	var kv jetstream.KeyValue
	err := jsretry.Do(ctx, time.Minute, func() (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SchemasBucket,
			Description: "a2ad host schema versions by digest", History: 1, Replicas: max(1, replicas),
			Storage: jetstream.FileStorage, MaxValueSize: 1 << 20})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", SchemasBucket, err)
	}
	return &schemaArchive{kv: kv}, nil
}

func archiveKey(digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: digest %q is not sha256:<64 hex>", artifact.ErrSchemaNotFound, digest)
	}
	return "sha256." + hex, nil
}

// Put stores doc once per digest: the same digest is the same bytes.
func (a *schemaArchive) Put(digest string, doc []byte) error {
	key, err := archiveKey(digest)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return jsretry.Do(ctx, 20*time.Second, func() error {
		_, err := a.kv.Create(ctx, key, doc)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil
		}
		return err
	})
}

// Get returns the document archived under digest.
func (a *schemaArchive) Get(digest string) ([]byte, error) {
	key, err := archiveKey(digest)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var doc []byte
	err = jsretry.Do(ctx, 20*time.Second, func() error {
		e, err := a.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: version %s is not archived", artifact.ErrSchemaNotFound, digest)
		}
		if err == nil {
			doc = e.Value()
		}
		return err
	})
	return doc, err
}
