"""Result rows: their schema, the sink that writes them, the file formats and reading.

schema      what a row is and the flat record it is written as (schema 5)
formats     the CSV and JSON text of records, and how it reaches the disk
paths       where outputs go, known without pandas: the file a result path names, a CSV's
            environment sidecar, the suffixes a figure may take
sink        ResultSink: outputs, each finished case committed to all of them (rewrite the
            first time, append after, resume from the rows already there)
repair      the lock on each output and the repair of a torn append: the committed part
            recorded before each append, a file cut back to it after a failed or killed one
lock        the lock file itself: who holds an output, and the record of its committed part
read        read_rows: CSV or JSON of any schema 1 to 5, back as a frame of schema 5
validate    the checks every row read must pass (types, sizes, finiteness, depth)
interrupts  SIGINT and SIGTERM from the first instruction, and stretches of code no signal
            may cut in two

Importing this package imports none of them (the command line's --help stays light).
"""
