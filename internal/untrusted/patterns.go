package untrusted

import "regexp"

// Kinds of injection phrasing [Scan] reports. The names are stable: they are
// shown to hosts and operators and may be matched on.
const (
	// InstructionOverride: telling the reader to drop what it was told
	// ("ignore all previous instructions", "ignore the above and …",
	// "override your rules", "new instructions:").
	InstructionOverride = "instruction_override"
	// RoleReassignment: telling the reader what it now is or must do as a
	// model ("you are now …", "as an AI language model you must …",
	// "pretend you are …", "your new task is …", "enable developer mode").
	RoleReassignment = "role_reassignment"
	// PromptReference: naming the reader's prompt ("system prompt",
	// "developer message", "BEGIN SYSTEM PROMPT", "reveal your
	// instructions", "hidden instructions").
	PromptReference = "prompt_reference"
	// Concealment: asking the reader to hide something from the person it
	// works for ("do not tell the user", "keep this secret from the
	// operator").
	Concealment = "concealment"
	// RoleTag: chat-template markup that would start a turn of another
	// role ("<system>", "</assistant>", "<|im_start|>", "[INST]",
	// "<<SYS>>", "<start_of_turn>", "### Instruction:").
	RoleTag = "role_tag"
)

// Kinds returns every kind [Scan] may report, in a new slice.
func Kinds() []string {
	return []string{InstructionOverride, RoleReassignment, PromptReference, Concealment, RoleTag}
}

// pattern is one expression of a kind, with what every match of it must
// contain: need is groups separated by ";", each a space-separated list of
// lowercase ASCII words (whole maximal runs of letters and digits) or
// single characters among < | [ #. Every match holds at least one item of
// each group and begins with an item of the first. [Scan] runs the
// expression only on a sentence that holds all groups, and only at the
// items of the first. Every expression starts with (?i), and none matches
// '.', '!' or '?' except as its last character. TestNeedWordsAreNecessary
// and FuzzScan check all this against a plain scan.
type pattern struct {
	kind string
	re   *regexp.Regexp
	need string
}

// core are the expressions agent card scanning started with
// (agentcard.InjectionWarnings), unchanged and in their order.
var core = []pattern{
	{InstructionOverride, regexp.MustCompile(`(?i)\b(ignore|disregard|forget)\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|preceding|system|original)\s+(instructions|prompts?|messages|rules|context)(?:\b|\d)`),
		"ignore disregard forget; previous prior above earlier preceding system original; instructions prompt prompts messages rules context"},
	{InstructionOverride, regexp.MustCompile(`(?i)\b(override|bypass)\s+(your|the|all|any)\s+(instructions|rules|guardrails|policies|safety)(?:\b|\d)`),
		"override bypass; your the all any; instructions rules guardrails policies safety"},
	{RoleReassignment, regexp.MustCompile(`(?i)\byou\s+are\s+now\b`),
		"you; are; now"},
	{PromptReference, regexp.MustCompile(`(?i)\b(system|developer)\s+(prompt|message)\b`),
		"system developer; prompt message"},
	{InstructionOverride, regexp.MustCompile(`(?i)\bnew\s+instructions\s*:`),
		"new; instructions"},
	{Concealment, regexp.MustCompile(`(?i)\b(do\s+not|don'?t)\s+(tell|inform|show)\s+(the\s+)?(user|human|operator)(?:\b|\d)`),
		"do don dont; tell inform show; user human operator"},
	{RoleTag, regexp.MustCompile(`(?i)</?\s*(system|assistant|user|instructions?)\s*>`),
		"<; system assistant user instruction instructions"},
}

// more are the expressions [Scan] adds to core. [Scan] matches them
// against text whose '_' and '-' are spaces, so "ignore-previous-
// instructions" and "<|im_start|>" are matched as "ignore previous
// instructions" and "<|im start|>".
//
// Deliberately absent, because fraud-review prose says them: "ignore" or
// "disregard" with an ordinary object ("ignore case C-12 as it is a
// duplicate", "disregard the above transaction"), "without notifying the
// user", "original instructions", "print the instructions", and line-start
// role labels ("System: …", "Assistant: …").
var more = []pattern{
	// "Ignore the above." / "Disregard the foregoing text and …": only
	// when the sentence ends there or turns to a new command, so that
	// "disregard the above transaction" passes.
	{InstructionOverride, regexp.MustCompile(`(?i)\b(ignore|disregard|forget)\s+(all\s+|everything\s+|anything\s+)?(of\s+)?(the\s+|that\s+|this\s+|what\s+(is|was)\s+)?(above|foregoing)\b` +
		`(\s+(text|directions?|instructions?|prompts?|messages?|content|context|rules|guidance|commands?|input))?\s*([.!;:,]|$|(and|then|instead|now)\b)`),
		"ignore disregard forget; above foregoing"},
	{InstructionOverride, regexp.MustCompile(`(?i)\b(ignore|disregard|forget)\s+(all|everything|anything)\s+(you\s+(were|have\s+been)\s+told|before\s+(this|now)|so\s+far|previously)\b`),
		"ignore disregard forget; all everything anything"},
	{InstructionOverride, regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override|bypass)\s+(all\s+|any\s+)?(your|the)\s+(previous\s+|prior\s+)?(guidelines|guardrails|safety\s+(rules|guidelines)|system\s+prompt|programming)\b`),
		"ignore disregard forget override bypass; your the; guidelines guardrails safety system programming"},
	{InstructionOverride, regexp.MustCompile(`(?i)\b(updated|revised|real|actual|true|new)\s+(system\s+)?instructions(\s*:|\s+are\s+as\s+follows\b|\s+follow\b)`),
		"updated revised real actual true new; instructions"},
	{InstructionOverride, regexp.MustCompile(`(?i)\bfrom\s+now\s+on\s*,?\s+(you|ignore|disregard|respond|reply|answer)\b`),
		"from; now; on"},
	{RoleReassignment, regexp.MustCompile(`(?i)\bas\s+an?\s+(ai|artificial\s+intelligence|(large\s+)?language\s+model|llm|ai\s+(language\s+)?model|ai\s+assistant|assistant|chatbot)\b` +
		`[^.!?\n]{0,60}?\byou\s+(must|should|will|shall|need\s+to|have\s+to|are\s+(required|obliged|instructed)\s+to)\b`),
		"as; you; ai intelligence model llm assistant chatbot; must should will shall need have are"},
	{RoleReassignment, regexp.MustCompile(`(?i)\b(pretend|imagine)\s+(to\s+be|(that\s+)?you\s+are|you're|you\s+were)\b`),
		"pretend imagine; be you"},
	{RoleReassignment, regexp.MustCompile(`(?i)\bact\s+as\s+(if\s+you\s+(are|were)\s+)?(an?\s+)?(unrestricted|unfiltered|uncensored|jailbroken|dan|developer\s+mode|admin(istrator)?|root|system)\b`),
		"act; as"},
	{RoleReassignment, regexp.MustCompile(`(?i)\byour\s+(new|real|true|actual)\s+(role|task|job|goal|objective|purpose|instructions?)\s+(is|are|will\s+be)\b`),
		"your; new real true actual; role task job goal objective purpose instruction instructions"},
	{RoleReassignment, regexp.MustCompile(`(?i)\b(enter|enable|activate|switch\s+to)\s+(developer|god|admin|dan|jailbreak|unrestricted)\s+mode\b`),
		"enter enable activate switch; mode"},
	{PromptReference, regexp.MustCompile(`(?i)\b(begin|end|start)(\s+of)?\s+(the\s+)?(system|developer|hidden|secret)\s+(prompt|instructions|message)\b`),
		"begin end start; system developer hidden secret; prompt instructions message"},
	{PromptReference, regexp.MustCompile(`(?i)\b(reveal|print|repeat|output|show|leak|disclose|display)\s+(me\s+)?your\s+((full|entire|initial|original|hidden|secret)\s+)*(system\s+)?(prompt|instructions)\b`),
		"reveal print repeat output show leak disclose display; your; prompt instructions"},
	{PromptReference, regexp.MustCompile(`(?i)\b(hidden|secret)\s+(system\s+)?(prompt|instructions)\b`),
		"hidden secret; prompt instructions"},
	{Concealment, regexp.MustCompile(`(?i)\b(do\s+not|don'?t|never)\s+(mention|reveal|disclose|say|tell|show|inform|let)\b[^.!?\n]{0,40}?\b(user|human|operator)\b`),
		"do don dont never; mention reveal disclose say tell show inform let; user human operator"},
	{Concealment, regexp.MustCompile(`(?i)\b(keep|hide)\s+(this|these|it|that)(\s+(message|instruction|instructions|information))?\s+((secret|hidden|confidential|private)\s+)?from\s+(the\s+)?(user|human|operator)\b`),
		"keep hide; from; user human operator"},
	{RoleTag, regexp.MustCompile(`(?i)</?\s*(system|assistant|user|instructions?|developer|human|tool|system\s+prompt)\s*>`),
		"<; system assistant user instruction instructions developer human tool"},
	// <|im_start|>, <|im_end|>, <|system|>, <|eot_id|>, <|start_header_id|>,
	// <|endoftext|>: '_' has become a space.
	{RoleTag, regexp.MustCompile(`(?i)<\|\s*[a-z][a-z0-9 ]{0,30}\|>`),
		"<; |"},
	{RoleTag, regexp.MustCompile(`(?i)\[\s*/?\s*inst\s*\]`),
		"[; inst"},
	{RoleTag, regexp.MustCompile(`(?i)<<\s*/?\s*sys\s*>>`),
		"<; sys"},
	{RoleTag, regexp.MustCompile(`(?i)<\s*/?\s*(start|end)\s+of\s+turn\s*>`),
		"<; start end; turn"},
	{RoleTag, regexp.MustCompile(`(?i)###\s*(instruction|instructions|system|response)\s*:`),
		"#; instruction instructions system response"},
}

// CorePatterns returns, in their fixed order, the seven expressions agent
// card scanning has always used; [Scan] uses them too, among others. Each is
// shared: callers must not call its Longest method. agentcard reports the
// phrase the first matching one finds.
func CorePatterns() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(core))
	for i, p := range core {
		out[i] = p.re
	}
	return out
}
