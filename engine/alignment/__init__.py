"""The alignment benchmark's engine code: its run spec (:mod:`.spec`), noise models (:mod:`.noise`), cached pair
datasets (:mod:`.datasets`), training and evaluation helpers (:mod:`.training`), presets (:mod:`.preset`), the worker
loop (:mod:`.run`) and the measured step costs used for estimates (:mod:`.throughput`). The family itself (what the
manager sees) is registered by :mod:`engine.alignment.family`."""
