"""Where a person decides: the (DaiFu) console and the approval prompt."""
