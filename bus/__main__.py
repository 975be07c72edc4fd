from bus.cli import main

raise SystemExit(main())
