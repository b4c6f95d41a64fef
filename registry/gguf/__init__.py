"""The GGUF file format: type tables, header parser, facts, file name convention."""
