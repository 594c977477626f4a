"""Result rows: their schema, the sink that writes them, the file formats and reading.

schema      what a row is and the flat record it is written as (schema 5)
formats     the CSV and JSON text of records, and how it reaches the disk
sink        ResultSink: outputs, each finished case appended to all of them
lock        the lock beside an output, and the record of a killed run's committed length
read        read_rows: CSV or JSON of any schema 1 to 5, back as a frame of schema 5
validate    the checks every row read must pass (types, sizes, finiteness, depth)
interrupts  SIGINT and SIGTERM from the first instruction, and stretches of code no signal
            may cut in two

Importing this package imports none of them (the command line's --help stays light).
"""
