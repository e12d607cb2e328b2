"""Conversation traces: the chat-completions exchanges of a real agent, one `lab.schemas.ConversationStep` per
line. `record` is the pass-through an agent is pointed at (`lab trace record`), `assemble` what it reads of a
reply (a JSON body, or a stream's chunks merged into one message)."""
