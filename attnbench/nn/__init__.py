"""Small Transformer encoders in plain torch, with the attention a pluggable callable: the
model study's encoder and the masked language model trained with YOSO attention whose
queries, keys and values `--inputs model:yoso-mlm` reads."""
