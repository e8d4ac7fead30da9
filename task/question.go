package task

import (
	"mime"

	"github.com/a2ad/a2ad/artifact"
	"github.com/a2ad/a2ad/internal/a2a"
)

// setQuestionSchema sets r's QuestionSchema and QuestionSchemaNote from
// the status message m that put the question r.Question: the first data
// part of mediaType application/schema+json, if it is a question form
// ([artifact.ParseQuestionForm]). A schema outside the form subset, or one
// without question text to go with it, is not taken: the question stays
// free text, and the note says why. Only input-required questions take a
// form (an auth-required one is a confirmation).
func (r *Record) setQuestionSchema(m *a2a.Message) {
	r.QuestionSchema, r.QuestionSchemaNote = nil, ""
	if r.State != InputRequired || m == nil {
		return
	}
	for _, p := range m.Parts {
		if p.Kind() != "data" {
			continue
		}
		if mt, _, err := mime.ParseMediaType(p.MediaType); err != nil || mt != artifact.QuestionSchemaMediaType {
			continue
		}
		if r.Question == "" {
			r.QuestionSchemaNote = "question schema not taken: the status message has no text part with the question"
			return
		}
		f, err := artifact.ParseQuestionForm(p.Data)
		if err != nil {
			r.QuestionSchemaNote = "question schema not taken, the question is free text: " + err.Error()
			return
		}
		r.QuestionSchema = f.Encode()
		return
	}
}
