"""`testbed advise`: the model's cheapest settings that meet a goal, confirmed
in emulation and judged; advice.json and a folder of answers as one table."""
