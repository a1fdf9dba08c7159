import sys

from volcano_metronome.cli import main

sys.exit(main())
