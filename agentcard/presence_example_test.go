package agentcard_test

import (
	"fmt"

	"github.com/a2ad/a2ad/agentcard"
)

// The worked example of A2A 1.0 §8.4.1: the REQUIRED description and skills
// stay at their default, as do the optional capabilities set to false; the
// empty extensions go.
func ExampleSigningPayload() {
	card := []byte(`{
	  "name": "Example Agent",
	  "description": "",
	  "capabilities": {"streaming": false, "pushNotifications": false, "extensions": []},
	  "skills": [],
	  "signatures": [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}]
	}`)
	payload, err := agentcard.SigningPayload(card)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(payload))
	// Output:
	// {"capabilities":{"pushNotifications":false,"streaming":false},"description":"","name":"Example Agent","skills":[]}
}
