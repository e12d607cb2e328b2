"""Conversations: traces that carry what an agent really sent (chat-completions requests and the replies it
got), loaded and checked (load), written synthetically with evictions and screenshots (synth), and turned into
each step's tokens through the model's own chat template and tokenizer (derive)."""
