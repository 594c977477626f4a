"""Result rows: their schema, the sink that writes them, the file formats and reading."""
