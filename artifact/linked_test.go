package artifact_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/a2ad/a2ad/artifact"
)

// testdata/schemas-linked holds two schemas that reference each other by
// $id, written with the https draft-07 meta-schema URI, as published
// schemas are: they load, and the referenced schema's constraints hold.
func TestLinkedSchemasTestdata(t *testing.T) {
	r, err := artifact.LoadDir("../testdata/schemas-linked")
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	s := mustGet(t, r, "shipment")
	type V = artifact.Violation
	for _, tc := range []struct {
		name, doc string
		want      []V
	}{
		{"valid", `{"case_id":"C-1","ship_to":{"postcode":"75001","city":"Paris"},"return_to":{"postcode":"10115","city":"Berlin"},"depot_postcode":"69001"}`, nil},
		{"ship_to postcode", `{"case_id":"C-1","ship_to":{"postcode":"750","city":"Paris"}}`, []V{{"/ship_to/postcode", "pattern"}}},
		{"return_to missing city", `{"case_id":"C-1","ship_to":{"postcode":"75001","city":"Paris"},"return_to":{"postcode":"10115"}}`, []V{{"/return_to/city", "required"}}},
		{"extra member in the referenced schema", `{"case_id":"C-1","ship_to":{"postcode":"75001","city":"Paris","note":"x"}}`, []V{{"/ship_to", "additionalProperties"}}},
		{"depot_postcode", `{"case_id":"C-1","ship_to":{"postcode":"75001","city":"Paris"},"depot_postcode":7}`, []V{{"/depot_postcode", "type"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Validate(json.RawMessage(tc.doc)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Validate = %v, want %v", got, tc.want)
			}
		})
	}
}
