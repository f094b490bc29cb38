"""The simulated node: state, geometry rules, the pynvml stand-in and the node files."""
