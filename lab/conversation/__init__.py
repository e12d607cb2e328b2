"""Conversations: traces that carry what an agent really sent (chat-completions requests and the replies it
got, one `lab.core.schemas.ConversationStep` per line). `record` is the pass-through an agent is pointed at
(`lab trace record`; `assemble` reads a reply, a JSON body or a stream's chunks, and `log` appends the steps),
`load` reads and checks a trace, `synth` writes one with evictions and screenshots, `derive` turns each step
into tokens through the model's own chat template and tokenizer, and `today` replays it to a server run the
way users run it.

It may import the models, the engine and the core; never an experiment or the catalog.
"""
