"""Where programs come from: importing a user's file, its ``@shardscope.demo`` and
``@shardscope.program`` functions, their example inputs and PRNG keys."""
