// Headroom's frontend entry point, served by ComfyUI from WEB_DIRECTORY at /extensions/<folder>/.
// Imports stay relative: the folder name differs between git clones and registry installs.
// The monitor panel, residency timeline, badges and preflight toasts arrive with the Memory Monitor.
import { app } from "../../scripts/app.js";

app.registerExtension({
  name: "Headroom.Core",
  aboutPageBadges: [
    {
      label: "Headroom",
      url: "https://github.com/comfyui-headroom/comfyui-headroom",
      icon: "pi pi-server",
    },
  ],
});
