"""One module per agent: its inputs, its rendered prompt, its output model and its call."""
