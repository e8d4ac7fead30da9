package agentcard_test

import (
	"fmt"
	"os"

	"github.com/a2ad/a2ad/agentcard"
)

func ExampleParse() {
	raw, err := os.ReadFile("../testdata/cards/fraud-review.json")
	if err != nil {
		panic(err)
	}
	card, err := agentcard.Parse(raw)
	if err != nil {
		panic(err)
	}
	in, _ := agentcard.NATSInterface(card)
	skill, _ := card.Skill("assess_refund_risk")
	fmt.Println(card.Name, card.Version)
	fmt.Println(in.URL)
	fmt.Println(skill.Name, skill.Tags)
	// Output:
	// Fraud Review Agent 1.0.0
	// nats://127.0.0.1:4222/a2a.agent.fraud-review
	// Assess refund risk [fraud refunds risk]
}

func ExampleParse_refused() {
	_, err := agentcard.Parse([]byte(`{"name": "Agent", "version": 1, "capabilities": {}, "skills": [{"id": "s"}]}`))
	fmt.Println(err)
	// Output:
	// agentcard: 8 faults: /version: must be a string; /description: required; /supportedInterfaces: required; /defaultInputModes: required; /defaultOutputModes: required; /skills/0/name: required; /skills/0/description: required; /skills/0/tags: required
}

func ExampleFingerprint() {
	a, _ := agentcard.Fingerprint([]byte(`{"name": "Agent", "version": "1.0.0"}`))
	b, _ := agentcard.Fingerprint([]byte(`{"version":"1.0.0","name":"Agent","signatures":[]}`))
	fmt.Println(a == b)
	fmt.Println(a)
	// Output:
	// true
	// sha256:7d2dcc9860a7e1b64bf7d82fd74fbda53e9644d21e0307c64b724a505fc31952
}

func ExampleCardURL() {
	for _, loc := range []string{"https://agent.example.com", "https://cards.example.com/fraud-review.json", "http://agent.example.com"} {
		fmt.Println(agentcard.CardURL(loc))
	}
	// Output:
	// https://agent.example.com/.well-known/agent-card.json <nil>
	// https://cards.example.com/fraud-review.json <nil>
	//  agentcard: card URL "http://agent.example.com": scheme must be https (http only on a loopback host)
}
