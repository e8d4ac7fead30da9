package mcpedge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Host schemas as MCP resources.
//
// Every host schema in force is a resource (MCP 2025-11-25 server/
// resources) at [SchemaURI] — a2ad://schemas/<name> — with mimeType
// application/schema+json, whose contents are the schema document a brief
// carries (artifact.Schema.Document: the file, compacted, with the schemas
// it references embedded). resources/list and resources/read need scope
// a2a:read. A reload of the host schemas (SIGHUP) replaces them, and the
// go-sdk sends notifications/resources/list_changed for it.

// SchemaURIPrefix begins the URI of every host schema resource.
const SchemaURIPrefix = "a2ad://schemas/"

// SchemaMIMEType is the media type of a host schema resource (the JSON
// Schema media type, draft 2020-12 §9.5; the documents are draft-07).
const SchemaMIMEType = "application/schema+json"

// SchemaURI is the resource URI of the host schema named name.
func SchemaURI(name string) string { return SchemaURIPrefix + url.PathEscape(name) }

// schemaResources keeps the server's resources in line with the catalog.
type schemaResources struct {
	mu      sync.Mutex
	digests map[string]string // by URI, of the listed schemas
}

// refreshSchemaResources lists the host schemas in force as resources:
// those gone are removed, new or changed ones (re)added, unchanged ones
// left alone, so a reload that changes nothing sends no notification.
func (e *Edge) refreshSchemaResources() {
	if e.server == nil || e.svc == nil || e.svc.Schemas == nil {
		return
	}
	e.res.mu.Lock()
	defer e.res.mu.Unlock()
	if e.res.digests == nil {
		e.res.digests = map[string]string{}
	}
	want := map[string]string{}
	for _, n := range e.svc.Schemas.Names() {
		s, err := e.svc.Schemas.Get(n)
		if err != nil {
			continue
		}
		uri := SchemaURI(n)
		want[uri] = s.Digest
		if e.res.digests[uri] == s.Digest {
			continue
		}
		r := &mcp.Resource{URI: uri, Name: n, Title: "Host schema " + n, MIMEType: SchemaMIMEType, Size: int64(len(s.Document)),
			Description: fmt.Sprintf("host schema %s (JSON Schema draft-07, version %s): usable as output_schema, or as an evidence schema where agents_list names it", n, s.Digest)}
		e.server.AddResource(r, e.readSchema)
	}
	var gone []string
	for uri := range e.res.digests {
		if _, ok := want[uri]; !ok {
			gone = append(gone, uri)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		e.server.RemoveResources(gone...)
	}
	e.res.digests = want
}

// schemaNames are the names of the host schemas in force (none without a
// catalog).
func (e *Edge) schemaNames() []string {
	if e.svc == nil || e.svc.Schemas == nil {
		return nil
	}
	return e.svc.Schemas.Names()
}

// readSchema serves resources/read of a host schema: the version in force.
func (e *Edge) readSchema(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	name, err := url.PathUnescape(strings.TrimPrefix(uri, SchemaURIPrefix))
	if err != nil || !strings.HasPrefix(uri, SchemaURIPrefix) {
		return nil, resourceNotFound(uri, e.schemaNames())
	}
	if e.svc == nil || e.svc.Schemas == nil {
		return nil, resourceNotFound(uri, nil)
	}
	s, err := e.svc.Schemas.Get(name)
	if err != nil {
		return nil, resourceNotFound(uri, e.schemaNames())
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: SchemaMIMEType, Text: string(s.Document)}}}, nil
}

// resourceNotFound is MCP's resource-not-found error (-32602 invalid
// params since SEP-2164, as go-sdk v1.8.0 answers, with data {"uri": …};
// the earlier -32002 is gone from the spec) in a2ad's words, naming the resources there are (at
// most 20).
func resourceNotFound(uri string, names []string) error {
	uris := make([]string, 0, min(len(names), 20))
	for _, n := range names[:min(len(names), 20)] {
		uris = append(uris, SchemaURI(n))
	}
	msg := fmt.Sprintf("resource not found: a2ad has no resource %s; its resources are the host schemas, %s", clip(uri, 200), strings.Join(uris, ", "))
	if len(uris) == 0 {
		msg = fmt.Sprintf("resource not found: a2ad has no resource %s; its resources are the host schemas, and none is loaded", clip(uri, 200))
	}
	if len(names) > 20 {
		msg += fmt.Sprintf(" (and %d more; resources/list has them all)", len(names)-20)
	}
	data, _ := json.Marshal(map[string]string{"uri": clip(uri, 200)})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg, Data: data}
}

// resourceGate is server middleware: resources/list and resources/read
// need scope a2a:read, and a read of a URI a2ad does not list is answered
// with [resourceNotFound] before the go-sdk answers it in its own words.
func (e *Edge) resourceGate(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/list", "resources/read", "resources/templates/list":
			if p := e.principalOf(req.GetExtra()); !slices.Contains(p.Scopes, ScopeRead) {
				return nil, &jsonrpc.Error{Code: CodeInsufficientScope,
					Message: fmt.Sprintf("insufficient_scope: %s needs scope %s, which this principal does not have", method, ScopeRead)}
			}
		}
		if method == "resources/read" {
			if rr, ok := req.(*mcp.ReadResourceRequest); ok && rr.Params != nil {
				e.res.mu.Lock()
				_, listed := e.res.digests[rr.Params.URI]
				e.res.mu.Unlock()
				if !listed {
					return nil, resourceNotFound(rr.Params.URI, e.schemaNames())
				}
			}
		}
		return next(ctx, method, req)
	}
}
