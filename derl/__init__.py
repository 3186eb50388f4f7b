"""derl: co-evolution of UNIMAL morphologies and their PPO controllers."""
